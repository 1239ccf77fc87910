package jobfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/e31net/e31/pkg/events"
)

// Job is a parsed job file: the spec plus what only the client knows.
type Job struct {
	// Spec is the normalized declaration. Its entries in Data that were
	// declared with a path have only a Name: the client fills in Digest,
	// Kind, Bytes and Files once it has uploaded them.
	Spec events.JobSpec
	// Paths maps the index of a data entry in Spec.Data to its local path
	// (absolute, resolved relative to the job file's folder), for entries
	// declared with `path:`. It is never nil.
	Paths map[int]string
	// Dir is the absolute folder of the job file.
	Dir string
	// Sweep holds the parameter values of a sweep (the file's sweep:
	// values, or "0".."N-1" for count: N), nil without one. The client
	// submits one job per value, with Spec.Sweep set.
	Sweep []string
}

// ParseFile reads and parses the job file at name. Problems with the file's
// content come back as an *Error naming the file as given; failing to read
// it is an ordinary error wrapping the os error.
func ParseFile(name string) (*Job, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("jobfile: %w", err)
	}
	defer f.Close()
	// One byte past the limit is enough for Parse to refuse the file without
	// reading all of something enormous (or endless, such as a pipe).
	src, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("jobfile: read %s: %w", name, err)
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, fmt.Errorf("jobfile: %w", err)
	}
	return Parse(name, src, filepath.Dir(abs))
}

// Parse parses the job file src, which is YAML or JSON. name is the file's
// name in messages; dir is the folder that relative data paths are resolved
// against ("" is the current directory). It reads nothing from disk: whether
// the data paths exist is for the uploader to find out.
//
// It returns the job, or nil and an *Error listing every problem found.
func Parse(name string, src []byte, dir string) (*Job, error) {
	r := &reader{problems: problems{file: name}}
	top, ok := r.document(src)
	if !ok {
		return nil, r.err()
	}
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("jobfile: resolve %s: %w", dir, err)
	}
	r.dir = abs
	job := &Job{
		Dir:   abs,
		Paths: map[int]string{},
		Spec: events.JobSpec{Request: events.Request{
			CPU:         DefaultCPU,
			MemoryBytes: DefaultMemory,
			GPU:         DefaultGPU,
			DiskBytes:   DefaultDisk,
		}},
	}
	readObject(r, at(top, ""), jobFields, job, "a mapping with work and request (and optionally name, data, output)")
	if err := r.err(); err != nil {
		return nil, err
	}
	return job, nil
}

// utf8BOM is tolerated at the start of a file: some Windows editors write it.
var utf8BOM = []byte("\xef\xbb\xbf")

// document checks the bounds, parses src and returns the one document's
// body.
func (r *reader) document(src []byte) (ast.Node, bool) {
	if len(src) > MaxFileBytes {
		r.add(0, 0, "", fmt.Sprintf("file is larger than %s; a job file is a few hundred bytes, data goes under data:", formatSize(MaxFileBytes)))
		return nil, false
	}
	src = bytes.TrimPrefix(src, utf8BOM)
	if !utf8.Valid(src) {
		line, col := invalidUTF8At(src)
		r.add(line, col, "", "file is not valid UTF-8")
		return nil, false
	}
	tokens := lexer.Tokenize(string(src))
	if len(tokens) > MaxTokens {
		line, col := tokenPos(tokens[MaxTokens])
		r.add(line, col, "", fmt.Sprintf("file has more than %d YAML tokens; a job file has a few hundred", MaxTokens))
		return nil, false
	}
	if tk := tooDeep(tokens); tk != nil {
		line, col := tokenPos(tk)
		r.add(line, col, "", fmt.Sprintf("nested more than %d levels deep", MaxDepth))
		return nil, false
	}
	f, err := parseTokens(tokens)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			line, col := tokenPos(ye.GetToken())
			r.add(line, col, "", "invalid YAML: "+ye.GetMessage())
		} else {
			r.add(0, 0, "", "invalid YAML: "+err.Error())
		}
		return nil, false
	}
	var bodies []ast.Node
	for _, d := range f.Docs {
		switch d.Body.(type) {
		case nil, *ast.DirectiveNode: // "%YAML 1.2" comes back as a document of its own
		default:
			bodies = append(bodies, d.Body)
		}
	}
	switch len(bodies) {
	case 0:
		r.add(0, 0, "", "file is empty (a job needs at least work.command and request.limit)")
		return nil, false
	case 1:
		return bodies[0], true
	}
	line, col := posOf(bodies[1])
	r.add(line, col, "", "a job file holds one YAML document, this is a second")
	return nil, false
}

// parseTokens runs the YAML parser. It is third-party code fed untrusted
// text, so a panic in it becomes a refused file rather than a crashed
// client; duplicate keys are let through because readObject reports them,
// all at once and in its own words.
func parseTokens(tokens token.Tokens) (f *ast.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("the parser failed (%v)", p)
		}
	}()
	return parser.Parse(tokens, 0, parser.AllowDuplicateMapKey())
}

// tooDeep returns the first token that is nested more than MaxDepth levels,
// or nil. It runs before the parser, whose cost grows with the square of the
// depth. Flow collections count their brackets; block collections count
// the distinct indentation columns of the keys and "- " entries that enclose
// a token. That can be off by one level either way per block collection
// (a list may sit at its key's column), which is fine for a bound.
func tooDeep(tokens token.Tokens) *token.Token {
	var flow int
	var block []int // columns of the open block collections, increasing
	var prev *token.Token
	push := func(col int) {
		for len(block) > 0 && block[len(block)-1] >= col {
			block = block[:len(block)-1]
		}
		block = append(block, col)
	}
	for _, tk := range tokens {
		if tk == nil || tk.Position == nil {
			continue
		}
		switch tk.Type {
		case token.CommentType:
			continue
		case token.SequenceStartType, token.MappingStartType:
			flow++
		case token.SequenceEndType, token.MappingEndType:
			flow = max(flow-1, 0)
		case token.SequenceEntryType, token.MappingKeyType:
			if flow == 0 {
				push(tk.Position.Column)
			}
		case token.MappingValueType:
			if flow == 0 && prev != nil && prev.Position.Line == tk.Position.Line {
				push(prev.Position.Column)
			}
		}
		if flow+len(block) > MaxDepth {
			return tk
		}
		prev = tk
	}
	return nil
}

func tokenPos(tk *token.Token) (int, int) {
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// invalidUTF8At returns the line and column of the first byte that is not
// UTF-8, counting columns in characters as the YAML parser does.
func invalidUTF8At(src []byte) (int, int) {
	line, col := 1, 1
	for len(src) > 0 {
		c, size := utf8.DecodeRune(src)
		if c == utf8.RuneError && size <= 1 {
			return line, col
		}
		if c == '\n' {
			line, col = line+1, 0
		}
		col++
		src = src[size:]
	}
	return line, col
}
