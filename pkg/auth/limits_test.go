package auth_test

import (
	"testing"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/limits"
)

// TestASubmitterReadsItsOwnLimitsAndNoOneElses: on a server enforcing the
// permissions, alice reads her limits (her key and the default) with
// direct gets, and nothing else of the bucket: not bob's key, not the
// bucket's listing or a watch, and she writes none of it.
func TestASubmitterReadsItsOwnLimitsAndNoOneElses(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	kv, err := limits.Setup(ctx, tr.js(t, auth.Identity{Role: auth.Operator, Name: "operator"}), 1)
	if err != nil {
		t.Fatal(err)
	}
	n := func(v int) *int { return &v }
	for key, p := range map[string]limits.Policy{
		limits.DefaultKey:   {MaxRate: n(60), Images: []string{"e31/base:1"}},
		limits.Key("alice"): {MaxQueued: n(20)},
		limits.Key("bob"):   {MaxQueued: n(7), Images: []string{"bob/private:1"}},
	} {
		if _, err := limits.Change(ctx, kv, key, func(have *limits.Policy) { *have = p }); err != nil {
			t.Fatal(err)
		}
	}
	nc := tr.conn(t, auth.Identity{Role: auth.Submitter, Name: "alice"})
	got, err := limits.ReadDirect(ctx, nc, "alice")
	if err != nil {
		t.Fatalf("alice reading her limits: %v (last refusal: %v)", err, nc.LastError())
	}
	if got.MaxQueued != 20 || got.MaxRate != 60 || len(got.Images) != 1 || got.Images[0] != "e31/base:1" {
		t.Fatalf("alice's limits = %+v, want max-queued 20, max-rate 60, e31/base:1", got)
	}
	if _, err := limits.ReadDirect(short(t), nc, "bob"); err == nil {
		t.Error("alice read bob's limits")
	}
	for _, s := range []string{
		limits.DirectGetSubject(limits.Key("bob")),
		"$JS.API.DIRECT.GET." + limits.Stream,
		"$JS.API.STREAM.INFO." + limits.Stream,
		"$JS.API.STREAM.MSG.GET." + limits.Stream,
		"$JS.API.CONSUMER.CREATE." + limits.Stream,
		"$KV." + limits.Bucket + "." + limits.Key("alice"),
		"$KV." + limits.Bucket + "." + limits.DefaultKey,
	} {
		if !refused(t, nc, s) {
			t.Errorf("alice may publish on %s", s)
		}
	}
}
