// Package limits holds what the operator allows each submitter: how much
// data it may keep (its data bucket's MaxBytes), how many jobs it may have
// queued (submitted and not yet over), how many it may submit a minute, and
// which container images its jobs may name.
//
// The policy lives in the KV bucket E31_LIMITS, one key per submitter
// (submitter.<name>) and one for everyone (default), written by `e31
// setup`. A submitter's key overrides the default limit by limit; the
// images allowed to a submitter are those of the default key and of its
// own. A limit set nowhere has the built-in default (Defaults). SUBMIT
// enforces the queue, the rate and the images; the data bucket's MaxBytes
// enforces the data; a node's container executor checks the image again.
package limits

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Bucket is the KV bucket of the policy.
const Bucket = "E31_LIMITS"

// DefaultKey is the key of the policy for every submitter.
const DefaultKey = "default"

// Key is the key of one submitter's policy. It is prefixed so that no
// submitter's name can be the default key.
func Key(submitter string) string { return "submitter." + submitter }

// Unlimited, as a limit, means no limit.
const Unlimited = 0

// The built-in defaults, for a limit the operator set nowhere. They leave
// room for every workload e31 is tested with (a burst of 100,000 jobs from
// one submitter) while bounding what one tenant can make SUBMIT and RENT
// hold: an operator tightens them per submitter or for everyone.
const (
	// DefaultMaxDataBytes is no bound: JetStream reserves a bucket's
	// MaxBytes on its servers' file store when the bucket is made, so a
	// default of any size would make every new submitter's bucket take that
	// much, and creating one fails once the reservations exceed the store.
	// The operator gives each submitter its share (e31 setup --max-data).
	DefaultMaxDataBytes int64 = Unlimited
	// DefaultMaxQueued bounds a submitter's jobs submitted and not over.
	DefaultMaxQueued = 200_000
	// DefaultMaxRate bounds a submitter's submissions a minute.
	DefaultMaxRate = 120_000
)

// Policy is what one key holds. A nil limit is not set by this key; a
// limit of Unlimited (0) is no limit.
type Policy struct {
	MaxDataBytes *int64 `json:"max_data_bytes,omitempty"`
	MaxQueued    *int   `json:"max_queued,omitempty"`
	// MaxRate is submissions a minute.
	MaxRate *int `json:"max_rate,omitempty"`
	// Images are the container images allowed (see Allows).
	Images []string `json:"images,omitempty"`
}

// Decode reads a stored policy; an empty value is an empty policy.
func Decode(data []byte) (Policy, error) {
	var p Policy
	if len(data) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("limits: decode policy: %w", err)
	}
	return p, nil
}

// Encode is the stored form of p.
func (p Policy) Encode() []byte {
	b, _ := json.Marshal(p)
	return b
}

// Limits are one submitter's effective limits. Zero limits are none.
type Limits struct {
	Submitter    string   `json:"submitter"`
	MaxDataBytes int64    `json:"max_data_bytes"`
	MaxQueued    int      `json:"max_queued"`
	MaxRate      int      `json:"max_rate"`
	Images       []string `json:"images"`
}

// Resolve gives submitter's limits from the default policy and its own:
// its own limit where set, else the default key's, else the built-in one;
// the images of both.
func Resolve(submitter string, def, own Policy) Limits {
	l := Limits{Submitter: submitter, MaxDataBytes: DefaultMaxDataBytes, MaxQueued: DefaultMaxQueued, MaxRate: DefaultMaxRate, Images: []string{}}
	for _, p := range []Policy{def, own} {
		if p.MaxDataBytes != nil {
			l.MaxDataBytes = *p.MaxDataBytes
		}
		if p.MaxQueued != nil {
			l.MaxQueued = *p.MaxQueued
		}
		if p.MaxRate != nil {
			l.MaxRate = *p.MaxRate
		}
		for _, im := range p.Images {
			if !slices.Contains(l.Images, im) {
				l.Images = append(l.Images, im)
			}
		}
	}
	return l
}

// Allows reports whether a job of the submitter may name image. A pattern
// matches an image equal to it, or, if it ends with '*', any image that
// starts with what comes before the '*' ("registry.example/team/*").
func (l Limits) Allows(image string) bool {
	for _, p := range l.Images {
		if p == image || strings.HasSuffix(p, "*") && strings.HasPrefix(image, strings.TrimSuffix(p, "*")) {
			return true
		}
	}
	return false
}

// ImageProblem is why a job of the submitter may not name image, or ""
// if it may (or names none).
func (l Limits) ImageProblem(image string) string {
	if image == "" || l.Allows(image) {
		return ""
	}
	allowed := "none"
	if len(l.Images) > 0 {
		allowed = strings.Join(l.Images, ", ")
	}
	return fmt.Sprintf("image %q is not allowed for %s; allowed: %s", image, l.Submitter, allowed)
}

// Usage is what a submitter had when it asked for one more job: its jobs
// queued (submitted, or asked for and not yet decided, and not over) and
// its submissions in the minute before.
type Usage struct {
	Queued int
	Recent int
}

// Admit is why the submitter may not have one more job, given what it has,
// or "" if it may. It is a pure function of its input.
func Admit(l Limits, u Usage) string {
	if l.MaxQueued != Unlimited && u.Queued >= l.MaxQueued {
		return fmt.Sprintf("quota: %s may have at most %d jobs queued (max-queued), %d are", l.Submitter, l.MaxQueued, u.Queued)
	}
	if l.MaxRate != Unlimited && u.Recent >= l.MaxRate {
		return fmt.Sprintf("quota: %s may submit at most %d jobs a minute (max-rate), %d were in the last minute", l.Submitter, l.MaxRate, u.Recent)
	}
	return ""
}
