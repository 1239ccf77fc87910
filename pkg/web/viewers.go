package web

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// ReadViewers reads a file of "NAME TOKEN" lines (--http-viewers): who may
// log in to the page, and as whom (a submitter, or operator or auditor):
// Config.Viewers. Blank lines and lines starting with # are skipped; no
// file is no viewers.
func ReadViewers(file string) (map[string]string, error) {
	if file == "" {
		return nil, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want NAME TOKEN", file, n)
		}
		if _, dup := out[fields[1]]; dup {
			return nil, fmt.Errorf("%s:%d: a token given twice", file, n)
		}
		out[fields[1]] = fields[0]
	}
	return out, sc.Err()
}
