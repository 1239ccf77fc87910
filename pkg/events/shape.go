package events

import (
	"reflect"
	"strings"
	"time"
	"unicode/utf8"
)

// A shape is what an event type's JSON body may hold, read from its Go type
// once: which fields each object has and what kind of JSON value each is.
//
// Decoding a body with a stream decoder that refuses unknown fields and
// then asks for one more token, which must be the end, costs a quarter
// more than a plain Unmarshal; the audit's replay and every service's
// rebuild decode every event of the log. A plain Unmarshal, though, drops
// unknown fields and may read what the strict decoder refuses. So a body
// is first checked against its type's shape, a single pass over its bytes
// that allocates nothing, and only a body the shape vouches for is
// decoded with Unmarshal. The check is narrower than the strict decoder:
// it vouches only for a body both decoders read alike (known fields
// spelled exactly, once each, values of their field's kind, integers that
// fit, strings without surrogate escapes or invalid UTF-8, nothing after
// the object), and anything else, a field in another case or a float
// past 1e99, goes the strict way, with its exact errors.
// FuzzShapeAgreesWithStream holds the two paths to giving the same
// events and the same refusals.
type shape struct {
	kind shapeKind
	// nullable: null is a value (a pointer, slice or map), which both
	// decoders read as nil.
	nullable bool
	// elem is the shape of a slice's elements and a map's values.
	elem *shape
	// fields are an object's, embedded structs' fields inline.
	fields []shapeField
}

type shapeField struct {
	name  string
	shape *shape
}

type shapeKind uint8

const (
	shapeNever shapeKind = iota // a Go type the check does not know: vouch for nothing
	shapeString
	shapeBool
	shapeInt
	shapeFloat
	shapeObject // a struct: its fields
	shapeMap    // a map from strings
	shapeArray
)

// maxShapeFields bounds an object's fields: the check marks those seen in
// a 64-bit set.
const maxShapeFields = 64

// shapeOf reads the shape of T's JSON, as encoding/json maps it.
func shapeOf[T any]() *shape { return shapeOfType(reflect.TypeFor[T]()) }

func shapeOfType(t reflect.Type) *shape {
	if t == reflect.TypeFor[time.Time]() {
		// RFC 3339 text: a string that does not parse fails Unmarshal,
		// and the body goes the strict way.
		return &shape{kind: shapeString}
	}
	switch t.Kind() {
	case reflect.String:
		return &shape{kind: shapeString}
	case reflect.Bool:
		return &shape{kind: shapeBool}
	case reflect.Int, reflect.Int64:
		return &shape{kind: shapeInt}
	case reflect.Float64:
		return &shape{kind: shapeFloat}
	case reflect.Pointer:
		s := *shapeOfType(t.Elem())
		s.nullable = true
		return &s
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			break // base64 text, not an array
		}
		return &shape{kind: shapeArray, nullable: true, elem: shapeOfType(t.Elem())}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			break
		}
		return &shape{kind: shapeMap, nullable: true, elem: shapeOfType(t.Elem())}
	case reflect.Struct:
		s := &shape{kind: shapeObject}
		addFields(s, t)
		if len(s.fields) > maxShapeFields {
			break
		}
		return s
	}
	return &shape{kind: shapeNever}
}

// addFields adds t's JSON fields to s, those of an embedded struct without
// a name of its own inline, as encoding/json does.
func addFields(s *shape, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			addFields(s, f.Type)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s.fields = append(s.fields, shapeField{name: name, shape: shapeOfType(f.Type)})
	}
}

// vouches reports whether body is one JSON object of the shape, which a
// plain Unmarshal reads as the strict decoder does.
func (s *shape) vouches(body []byte) bool {
	c := cursor{b: body}
	c.space()
	if !c.object(s) {
		return false
	}
	c.space()
	return c.i == len(c.b)
}

// cursor walks a body once; its methods report whether what comes next is
// a value of a shape, and step over it.
type cursor struct {
	b []byte
	i int
}

func (c *cursor) space() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// next is the byte at the cursor, 0 at the end.
func (c *cursor) next() byte {
	if c.i < len(c.b) {
		return c.b[c.i]
	}
	return 0
}

func (c *cursor) literal(lit string) bool {
	if len(c.b)-c.i < len(lit) || string(c.b[c.i:c.i+len(lit)]) != lit {
		return false
	}
	c.i += len(lit)
	return true
}

func (c *cursor) value(s *shape) bool {
	if s.nullable && c.next() == 'n' {
		return c.literal("null")
	}
	switch s.kind {
	case shapeString:
		_, ok := c.text()
		return ok
	case shapeBool:
		return c.literal("true") || c.literal("false")
	case shapeInt:
		return c.integer()
	case shapeFloat:
		return c.number()
	case shapeObject:
		return c.object(s)
	case shapeMap:
		return c.mapping(s.elem)
	case shapeArray:
		return c.array(s.elem)
	}
	return false
}

// text steps over a string; plain is its content when it has no escapes.
func (c *cursor) text() (plain []byte, ok bool) {
	if c.next() != '"' {
		return nil, false
	}
	c.i++
	start, escaped := c.i, false
	for c.i < len(c.b) {
		b := c.b[c.i]
		switch {
		case b == '"':
			c.i++
			if escaped {
				return nil, true
			}
			return c.b[start : c.i-1], true
		case b < 0x20:
			return nil, false
		case b == '\\':
			escaped = true
			if !c.escape() {
				return nil, false
			}
		case b < utf8.RuneSelf:
			c.i++
		default:
			r, n := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && n == 1 {
				return nil, false
			}
			c.i += n
		}
	}
	return nil, false
}

// escape steps over one escape sequence; a \u of a surrogate is left to
// the strict decoder, which pairs them or replaces them as encoding/json
// does.
func (c *cursor) escape() bool {
	if c.i+1 >= len(c.b) {
		return false
	}
	switch c.b[c.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		c.i += 2
		return true
	case 'u':
		if c.i+6 > len(c.b) {
			return false
		}
		var r rune
		for _, h := range c.b[c.i+2 : c.i+6] {
			switch {
			case '0' <= h && h <= '9':
				r = r<<4 | rune(h-'0')
			case 'a' <= h && h <= 'f':
				r = r<<4 | rune(h-'a'+10)
			case 'A' <= h && h <= 'F':
				r = r<<4 | rune(h-'A'+10)
			default:
				return false
			}
		}
		if 0xD800 <= r && r < 0xE000 {
			return false
		}
		c.i += 6
		return true
	}
	return false
}

// digits steps over decimal digits and says how many.
func (c *cursor) digits() int {
	n := 0
	for c.i < len(c.b) && '0' <= c.b[c.i] && c.b[c.i] <= '9' {
		c.i++
		n++
	}
	return n
}

// integer steps over an integer that fits in an int64: 18 digits at most.
func (c *cursor) integer() bool {
	if c.next() == '-' {
		c.i++
	}
	if c.next() == '0' {
		c.i++
		return true
	}
	n := c.digits()
	return 0 < n && n <= 18
}

// number steps over a JSON number a float64 holds without overflow: 30
// digits at most before its exponent, which has 2 at most.
func (c *cursor) number() bool {
	if c.next() == '-' {
		c.i++
	}
	n := 0
	if c.next() == '0' {
		c.i++
		n = 1
	} else if n = c.digits(); n == 0 {
		return false
	}
	if c.next() == '.' {
		c.i++
		f := c.digits()
		if f == 0 {
			return false
		}
		n += f
	}
	if n > 30 {
		return false
	}
	if b := c.next(); b == 'e' || b == 'E' {
		c.i++
		if b := c.next(); b == '+' || b == '-' {
			c.i++
		}
		if e := c.digits(); e == 0 || e > 2 {
			return false
		}
	}
	return true
}

// object steps over an object of s's fields, each at most once.
func (c *cursor) object(s *shape) bool {
	if s.kind != shapeObject {
		return false
	}
	if empty, ok := c.open('{', '}'); !ok || empty {
		return ok
	}
	var seen uint64
	for {
		name, ok := c.text()
		if !ok || name == nil {
			return false
		}
		f := -1
		for i := range s.fields {
			if s.fields[i].name == string(name) {
				f = i
				break
			}
		}
		if f < 0 || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		if !c.colon() || !c.value(s.fields[f].shape) {
			return false
		}
		if end, ok := c.more('}'); !ok || end {
			return ok
		}
	}
}

// maxMapKeys bounds the keys of a map the check vouches for: it looks for
// a repeated key among those before.
const maxMapKeys = 32

// mapping steps over an object of values of elem, under distinct keys.
func (c *cursor) mapping(elem *shape) bool {
	if empty, ok := c.open('{', '}'); !ok || empty {
		return ok
	}
	var keys [maxMapKeys][]byte
	for n := 0; ; n++ {
		key, ok := c.text()
		if !ok || key == nil || n == maxMapKeys {
			return false
		}
		for _, k := range keys[:n] {
			if string(k) == string(key) {
				return false
			}
		}
		keys[n] = key
		if !c.colon() || !c.value(elem) {
			return false
		}
		if end, ok := c.more('}'); !ok || end {
			return ok
		}
	}
}

// array steps over an array of values of elem.
func (c *cursor) array(elem *shape) bool {
	if empty, ok := c.open('[', ']'); !ok || empty {
		return ok
	}
	for {
		if !c.value(elem) {
			return false
		}
		if end, ok := c.more(']'); !ok || end {
			return ok
		}
	}
}

// open steps over the opening byte of an object or array and the space
// after it (ok false if it is not there), and over the closing byte too
// when nothing is in between (empty).
func (c *cursor) open(opening, closing byte) (empty, ok bool) {
	if c.next() != opening {
		return false, false
	}
	c.i++
	c.space()
	if c.next() == closing {
		c.i++
		return true, true
	}
	return false, true
}

// colon steps over the ':' after a key, and the space around it.
func (c *cursor) colon() bool {
	c.space()
	if c.next() != ':' {
		return false
	}
	c.i++
	c.space()
	return true
}

// more steps over what follows a member or an element: a comma and the
// space before the next one (end false), or the closing byte (end true).
func (c *cursor) more(closing byte) (end, ok bool) {
	c.space()
	switch c.next() {
	case ',':
		c.i++
		c.space()
		return false, true
	case closing:
		c.i++
		return true, true
	}
	return false, false
}
