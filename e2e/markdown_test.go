package e2e

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// A minimal reader of a document's command blocks, for deploy/README.md's
// blocks, which the cluster test runs as written. The docs helper's fuller
// version (console transcripts, fences without a language as errors) has
// the same signature and replaces this one.

// block is one fenced block of commands in a document.
type block struct {
	// Path and Line say where the block's first command is.
	Path string
	Line int
	// Shell runs the commands: "sh" or "bash".
	Shell string
	// Commands are the block's commands, as written.
	Commands string
	// NotRun is the reason a `<!-- not run: … -->` marker before the
	// block gives; "" if the block is to be run.
	NotRun string
	// Background says a `<!-- in the background: … -->` marker asks the
	// block to be started and left running.
	Background bool
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.Path, b.Line) }

var (
	fenceRE  = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")
	markerRE = regexp.MustCompile(`^<!--\s*(not run|in the background)\s*:\s*(.*?)\s*-->$`)
)

// shellBlocks returns the sh and bash blocks of the markdown file at path,
// in order, with the marker on the last non-blank line before each.
func shellBlocks(t testing.TB, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("read the document: %v", err)
	}
	defer f.Close()
	var blocks []block
	var marker []string
	var fence string
	var cur *block
	var lines []string
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if fence != "" {
			if strings.TrimSpace(line) == fence {
				if cur != nil {
					cur.Commands = strings.Join(lines, "\n") + "\n"
					blocks = append(blocks, *cur)
				}
				fence, cur, lines = "", nil, nil
				continue
			}
			lines = append(lines, line)
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[1]
			if m[2] == "sh" || m[2] == "bash" || m[2] == "shell" {
				cur = &block{Path: path, Line: n + 1, Shell: "sh"}
				if m[2] == "bash" {
					cur.Shell = "bash"
				}
				if marker != nil {
					if marker[1] == "not run" {
						cur.NotRun = marker[2]
						if cur.NotRun == "" {
							t.Errorf("%s:%d: \"not run\" needs a reason", path, n-1)
						}
					} else {
						cur.Background = true
					}
				}
			}
			marker = nil
			continue
		}
		if trimmed := strings.TrimSpace(line); trimmed != "" {
			marker = markerRE.FindStringSubmatch(trimmed)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if fence != "" {
		t.Errorf("%s: a fence is never closed", path)
	}
	return blocks
}
