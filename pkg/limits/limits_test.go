package limits_test

import (
	"slices"
	"testing"

	"github.com/e31net/e31/pkg/limits"
)

func ptr[T any](v T) *T { return &v }

func TestResolveTakesTheSubmittersLimitThenTheDefaultsThenTheBuiltIn(t *testing.T) {
	t.Parallel()
	def := limits.Policy{MaxQueued: ptr(100), Images: []string{"e31/base:1"}}
	own := limits.Policy{MaxQueued: ptr(20), MaxRate: ptr(limits.Unlimited), Images: []string{"team/*", "e31/base:1"}}
	got := limits.Resolve("alice", def, own)
	want := limits.Limits{Submitter: "alice", MaxDataBytes: limits.DefaultMaxDataBytes, MaxQueued: 20, MaxRate: 0,
		Images: []string{"e31/base:1", "team/*"}}
	if got.Submitter != want.Submitter || got.MaxDataBytes != want.MaxDataBytes || got.MaxQueued != want.MaxQueued ||
		got.MaxRate != want.MaxRate || !slices.Equal(got.Images, want.Images) {
		t.Fatalf("Resolve = %+v, want %+v", got, want)
	}
	if bob := limits.Resolve("bob", def, limits.Policy{}); bob.MaxQueued != 100 || bob.MaxRate != limits.DefaultMaxRate || !slices.Equal(bob.Images, []string{"e31/base:1"}) {
		t.Fatalf("bob = %+v", bob)
	}
}

func TestImagesAreAllowedByNameOrPrefix(t *testing.T) {
	t.Parallel()
	l := limits.Limits{Submitter: "alice", Images: []string{"e31/base:1", "registry.example/team/*"}}
	for image, problem := range map[string]string{
		"":                              "",
		"e31/base:1":                    "",
		"registry.example/team/x:2":     "",
		"e31/base:2":                    `image "e31/base:2" is not allowed for alice; allowed: e31/base:1, registry.example/team/*`,
		"registry.example/teamster/x:1": `image "registry.example/teamster/x:1" is not allowed for alice; allowed: e31/base:1, registry.example/team/*`,
	} {
		if got := l.ImageProblem(image); got != problem {
			t.Errorf("ImageProblem(%q) = %q, want %q", image, got, problem)
		}
	}
	none := limits.Limits{Submitter: "bob"}
	if got, want := none.ImageProblem("x"), `image "x" is not allowed for bob; allowed: none`; got != want {
		t.Errorf("no images allowed: %q, want %q", got, want)
	}
}

func TestAdmitNamesTheLimitAndItsValue(t *testing.T) {
	t.Parallel()
	l := limits.Limits{Submitter: "alice", MaxQueued: 20, MaxRate: 10}
	for _, tc := range []struct {
		name string
		l    limits.Limits
		u    limits.Usage
		want string
	}{
		{"room", l, limits.Usage{Queued: 19, Recent: 9}, ""},
		{"queue full", l, limits.Usage{Queued: 20, Recent: 0}, "quota: alice may have at most 20 jobs queued (max-queued), 20 are"},
		{"rate reached", l, limits.Usage{Queued: 3, Recent: 10}, "quota: alice may submit at most 10 jobs a minute (max-rate), 10 were in the last minute"},
		{"unlimited", limits.Limits{Submitter: "alice"}, limits.Usage{Queued: 1 << 30, Recent: 1 << 30}, ""},
	} {
		if got := limits.Admit(tc.l, tc.u); got != tc.want {
			t.Errorf("%s: Admit = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPolicyRoundTrips(t *testing.T) {
	t.Parallel()
	p := limits.Policy{MaxDataBytes: ptr(int64(1 << 20)), MaxQueued: ptr(0), Images: []string{"a"}}
	got, err := limits.Decode(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if *got.MaxDataBytes != 1<<20 || *got.MaxQueued != 0 || got.MaxRate != nil || !slices.Equal(got.Images, p.Images) {
		t.Fatalf("round trip: %+v", got)
	}
}
