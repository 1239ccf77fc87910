package limits

import (
	"fmt"
	"slices"
	"strings"
)

// Edit is a change to stored policies (`e31 setup`'s limit flags): a nil
// limit is left as it is, and Images are allowed on top of those already.
type Edit struct {
	MaxDataBytes       *int64
	MaxQueued, MaxRate *int
	Images             []string
}

// Empty is whether e changes nothing.
func (e Edit) Empty() bool {
	return e.MaxDataBytes == nil && e.MaxQueued == nil && e.MaxRate == nil && len(e.Images) == 0
}

// Apply changes p as e says (for Change).
func (e Edit) Apply(p *Policy) {
	if e.MaxDataBytes != nil {
		p.MaxDataBytes = e.MaxDataBytes
	}
	if e.MaxQueued != nil {
		p.MaxQueued = e.MaxQueued
	}
	if e.MaxRate != nil {
		p.MaxRate = e.MaxRate
	}
	for _, im := range e.Images {
		if !slices.Contains(p.Images, im) {
			p.Images = append(p.Images, im)
		}
	}
}

// ParseLimit reads "unlimited" (or "none") as Unlimited, anything else
// with parse. A limit of 0 is refused: it would refuse everything.
func ParseLimit(s string, parse func(string) (int64, error)) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "unlimited", "none":
		return Unlimited, nil
	}
	n, err := parse(s)
	if err == nil && n == 0 {
		return 0, fmt.Errorf("%q: a limit of 0 would refuse everything (say unlimited for none)", s)
	}
	return n, err
}
