package main

import (
	"embed"
	"strings"
)

// helpFiles are the commands' long help texts, one file each: prose is
// easier to keep right out of Go strings.
//
//go:embed help/*.txt
var helpFiles embed.FS

// help is the text of help/NAME.txt without its last newline, each
// {placeholder} of vars (pairs of placeholder and value) replaced.
func help(name string, vars ...string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic(err) // a file named here is missing from the binary: a build error
	}
	return strings.NewReplacer(vars...).Replace(strings.TrimSuffix(string(b), "\n"))
}
