package auth

import (
	"slices"
	"testing"
)

// TestCovers: a subject is dropped from a grant only when another one
// matches everything it does, so a grant made minimal allows the same.
func TestCovers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		y, x string
		want bool
	}{
		{"a.b", "a.b", true},
		{"a.*", "a.b", true},
		{"a.*", "a.*", true},
		{"a.*", "a.>", false},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a.*", true},
		{"a.>", "a.>", true},
		{"a.>", "a", false},
		{"a.b", "a.*", false},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"$JS.API.DIRECT.GET.*", "$JS.API.DIRECT.GET.E31", true},
		{"$JS.API.DIRECT.GET.*.>", "$JS.API.DIRECT.GET.E31.>", true},
		{"$JS.API.DIRECT.GET.*", "$JS.API.DIRECT.GET.E31.>", false},
		{"$JS.ACK.*.>", "$JS.ACK.*.*.E31.>", true},
		{"*.b", "a.c", false},
	} {
		if got := covers(c.y, c.x); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.y, c.x, got, c.want)
		}
	}
	got := minimal([]string{"a.b", "a.*", "a.b", "c.d", "c.d", "a.>"})
	if want := []string{"c.d", "a.>"}; !slices.Equal(got, want) {
		t.Errorf("minimal = %q, want %q", got, want)
	}
}
