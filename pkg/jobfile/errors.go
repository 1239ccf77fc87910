package jobfile

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a job file or a normalized spec: where it
// is and what was expected there.
type Problem struct {
	// File is the name the job file was parsed under; empty for a spec that
	// arrived as an event, which has no file.
	File string
	// Line and Column are 1-based; both are 0 when the position is not known
	// (always so for Validate, which sees no source text).
	Line, Column int
	// Path names the field, as in "request.limit", "data[1].name" or
	// "work.env.LANG"; empty when the problem is with the whole file.
	Path string
	// Message says what is wrong and, where it helps, what was expected.
	Message string
}

// String formats the problem the way compilers do, so that editors and
// terminals can jump to it:
//
//	job.yaml:7:3: request.limit: required (a duration such as 10m)
//
// Parts that are not known are left out, with their separator.
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(p.Line))
			if p.Column > 0 {
				b.WriteByte(':')
				b.WriteString(strconv.Itoa(p.Column))
			}
		}
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is every problem found in one job file or spec. Parse, ParseFile and
// Validate report all they find rather than stop at the first, so that a
// person fixes a file in one round trip; callers get it with errors.As.
type Error struct {
	// Problems is never empty and is sorted by position (problems without
	// one keep the order in which they were found). When there were more
	// than MaxProblems, the last one says how many more.
	Problems []Problem
}

// Error returns one problem per line.
func (e *Error) Error() string { return strings.Join(e.Lines(), "\n") }

// Lines returns each problem formatted as by Problem.String, in order. It is
// the form JobRejected.Problems carries.
func (e *Error) Lines() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

// problems collects what a parse or validation finds.
type problems struct {
	file string
	list []Problem
}

func (ps *problems) add(line, col int, path, msg string) {
	ps.list = append(ps.list, Problem{File: ps.file, Line: line, Column: col, Path: path, Message: msg})
}

// MaxProblems bounds the problems one Error lists, as compilers stop after
// a screenful: past it they are the same mistake again, and a hostile spec
// must not turn into a huge rejection event.
const MaxProblems = 50

// err returns nil when nothing was found, else an *Error with the problems
// sorted by position, at most MaxProblems of them and a last one that counts
// the rest. The explicit nil keeps a typed nil out of an error interface.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := slices.Clone(ps.list)
	slices.SortStableFunc(list, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if n := len(list) - MaxProblems; n > 0 {
		list = append(list[:MaxProblems], Problem{File: ps.file, Message: fmt.Sprintf("and %d more problems", n)})
	}
	return &Error{Problems: list}
}
