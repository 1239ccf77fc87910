package jobfile

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// This file walks the YAML syntax tree. Reading the tree rather than
// decoding into structs keeps the line and column of every value, so each
// problem can point at its place in the file.

// value is one place in the file that the reader looks at.
type value struct {
	// node is nil when a mapping field is not given: absent, or null
	// ("limit:" with nothing after it). List items keep their null node.
	node ast.Node
	path string
	// line and col are where node is or, when it is nil, where it was
	// expected (the enclosing mapping, or the null).
	line, col int
}

func (v value) given() bool { return v.node != nil }

// pos writes where v is, as "line:column".
func (v value) pos() string { return strconv.Itoa(v.line) + ":" + strconv.Itoa(v.col) }

// child is the place of a field of v that is not given.
func (v value) child(name string) value {
	return value{path: joinKey(v.path, name), line: v.line, col: v.col}
}

func at(n ast.Node, path string) value {
	line, col := posOf(n)
	return value{node: n, path: path, line: line, col: col}
}

// reader collects problems while it fills in a Job.
type reader struct {
	problems
	dir string // absolute folder against which data paths resolve
}

func (r *reader) fail(v value, msg string) { r.add(v.line, v.col, v.path, msg) }

// field is one key of a mapping in the job file and how to read its value
// into T. Adding a field to the format is adding a row to a table below and
// the function that reads it.
type field[T any] struct {
	name string
	// read is called once for every field of the table: with the value when
	// it is given, and with an ungiven value (node nil) when it is not, so
	// that required fields report themselves and defaults stay in place.
	read func(r *reader, v value, into *T)
}

// readObject reads a mapping whose keys are the fields of table. Unknown and
// duplicate keys are reported; when v is not given, every field is read as
// not given, so that required fields inside a missing section are reported
// by their full path ("request.limit: required"). It returns false when v is
// given but is not a mapping, after reporting it.
func readObject[T any](r *reader, v value, table []field[T], into *T, want string) bool {
	found := make(map[string]value, len(table))
	if v.given() {
		entries, ok := r.mapping(v, want)
		if !ok {
			return false
		}
		keyAt := make(map[string]string, len(entries))
		for _, e := range entries {
			name, kv, ok := r.key(e, v.path)
			if !ok {
				continue
			}
			if !slices.ContainsFunc(table, func(f field[T]) bool { return f.name == name }) {
				r.fail(kv, "unknown field (expected one of: "+fieldNames(table)+")")
				continue
			}
			if first, dup := keyAt[name]; dup {
				r.fail(kv, "duplicate key (first given at "+first+")")
				continue
			}
			keyAt[name] = kv.pos()
			fv := at(e.Value, kv.path)
			if fv.line == 0 {
				fv.line, fv.col = kv.line, kv.col
			}
			if _, null := e.Value.(*ast.NullNode); null {
				fv.node = nil // a null field counts as left out
			}
			found[name] = fv
		}
	}
	for _, f := range table {
		fv, ok := found[f.name]
		if !ok {
			fv = v.child(f.name)
		}
		f.read(r, fv, into)
	}
	return true
}

func fieldNames[T any](table []field[T]) string {
	names := make([]string, len(table))
	for i, f := range table {
		names[i] = f.name
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// plain returns the node of v, refusing the YAML features a job file does
// not use. Anchors, aliases and merge keys would let one place in the file
// stand for another, so that a problem's position could point to the wrong
// line; tags change a value's type behind its back. Quoting does all a job
// file needs.
func (r *reader) plain(v value) (ast.Node, bool) {
	switch n := v.node.(type) {
	case *ast.AnchorNode:
		r.fail(v, "YAML anchors (&name) are not supported in a job file")
	case *ast.AliasNode:
		r.fail(v, "YAML aliases (*name) are not supported in a job file")
	case *ast.TagNode:
		tag := "!"
		if n.Start != nil {
			tag = n.Start.Value
		}
		r.fail(v, fmt.Sprintf("YAML tags (%s) are not supported in a job file; quote the value instead", tag))
	case *ast.MergeKeyNode:
		r.fail(v, "YAML merge keys (<<) are not supported in a job file")
	default:
		return n, true
	}
	return nil, false
}

func (r *reader) mismatch(v value, want string) {
	r.fail(v, "expected "+want+", got "+describe(v.node))
}

// mapping returns the entries of a mapping.
func (r *reader) mapping(v value, want string) ([]*ast.MappingValueNode, bool) {
	n, ok := r.plain(v)
	if !ok {
		return nil, false
	}
	switch n := n.(type) {
	case *ast.MappingNode:
		return n.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{n}, true
	}
	r.mismatch(v, want)
	return nil, false
}

func isMapping(n ast.Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return true
	}
	return false
}

func isSequence(n ast.Node) bool {
	_, ok := n.(*ast.SequenceNode)
	return ok
}

// sequence returns the items of a list.
func (r *reader) sequence(v value, want string) ([]value, bool) {
	n, ok := r.plain(v)
	if !ok {
		return nil, false
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		r.mismatch(v, want)
		return nil, false
	}
	items := make([]value, len(seq.Values))
	for i, e := range seq.Values {
		items[i] = at(e, v.path+"["+strconv.Itoa(i)+"]")
		if items[i].line == 0 {
			items[i].line, items[i].col = v.line, v.col
		}
	}
	return items, true
}

// key returns the text of a mapping key and the place of its value's path,
// positioned at the key (where unknown and duplicate keys are reported).
func (r *reader) key(e *ast.MappingValueNode, parent string) (string, value, bool) {
	if e == nil || e.Key == nil {
		return "", value{}, false
	}
	kv := at(e.Key, parent)
	var name string
	switch k := e.Key.(type) {
	case *ast.StringNode:
		name = k.Value
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NullNode, *ast.InfinityNode, *ast.NanNode:
		// A key such as 1 or true is still a name someone typed.
		name = tokenText(k)
	default:
		if _, ok := r.plain(kv); ok {
			r.fail(kv, "a key must be a plain name")
		}
		return "", value{}, false
	}
	kv.path = joinKey(parent, name)
	return name, kv, true
}

// text reads a string. Other scalars are taken as written ("1.0" stays
// "1.0", "yes" stays "yes"), which is what a person who typed them into a
// command or an environment variable means.
func (r *reader) text(v value, want string) (string, bool) {
	n, ok := r.plain(v)
	if !ok {
		return "", false
	}
	switch n := n.(type) {
	case *ast.StringNode:
		return n.Value, true
	case *ast.LiteralNode:
		if n.Value == nil {
			return "", true
		}
		return n.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return tokenText(n), true
	}
	r.mismatch(v, want)
	return "", false
}

// yamlFloat is the YAML 1.2 core schema's number syntax. The parser leaves
// some of it as plain strings (1e3), which are numbers all the same; JSON
// writers produce them.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// number reads a number. A quoted "1" is a string, not a number: the file
// says what it means.
func (r *reader) number(v value, want string) (float64, bool) {
	n, ok := r.plain(v)
	if !ok {
		return 0, false
	}
	switch n := n.(type) {
	case *ast.IntegerNode:
		switch x := n.Value.(type) {
		case int64:
			return float64(x), true
		case uint64:
			return float64(x), true
		}
	case *ast.FloatNode:
		return n.Value, true
	case *ast.InfinityNode, *ast.NanNode:
		r.fail(v, "must be a finite number, got "+tokenText(n))
		return 0, false
	case *ast.StringNode:
		if tk := n.GetToken(); tk != nil && tk.Type == token.StringType && yamlFloat.MatchString(n.Value) {
			// Out of range parses to ±Inf, which the caller's bounds refuse.
			f, _ := strconv.ParseFloat(n.Value, 64)
			return f, true
		}
	}
	r.mismatch(v, want)
	return 0, false
}

func (r *reader) boolean(v value, want string) (bool, bool) {
	n, ok := r.plain(v)
	if !ok {
		return false, false
	}
	if b, ok := n.(*ast.BoolNode); ok {
		return b.Value, true
	}
	r.mismatch(v, want)
	return false, false
}

// size reads a size: a number of bytes or a string with a unit.
func (r *reader) size(v value, want string) (int64, bool) {
	s, ok := r.text(v, want)
	if !ok {
		return 0, false
	}
	n, why := parseSize(s)
	if why != "" {
		r.fail(v, why)
		return 0, false
	}
	return n, true
}

// describe says what a node is, for "expected …, got …".
func describe(n ast.Node) string {
	switch n := n.(type) {
	case nil, *ast.NullNode:
		return "null"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode:
		return quote(n.Value)
	case *ast.LiteralNode:
		return "a block of text"
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return tokenText(n)
	}
	return "unsupported YAML"
}

func tokenText(n ast.Node) string {
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// posOf returns the line and column of n, or 0, 0 when it has none. A
// block mapping's own token is the first ':'; people think of it as where
// its first key is.
func posOf(n ast.Node) (int, int) {
	switch m := n.(type) {
	case nil:
		return 0, 0
	case *ast.MappingNode:
		if !m.IsFlowStyle && len(m.Values) > 0 && m.Values[0] != nil && m.Values[0].Key != nil {
			return posOf(m.Values[0].Key)
		}
	case *ast.MappingValueNode:
		if m.Key != nil {
			return posOf(m.Key)
		}
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinKey writes the path of a key: "work.env.LANG", or work.env["a b"]
// for a key that would not read as one path element.
func joinKey(parent, key string) string {
	if !simpleKey.MatchString(key) {
		return parent + "[" + quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}
