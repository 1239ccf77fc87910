package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/natstest"
)

// TestTheBookAndALookupSeeWhatTheOperatorWrote: a node's lookup reads the
// bucket at each call; SUBMIT's Book follows it as it changes.
func TestTheBookAndALookupSeeWhatTheOperatorWrote(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	look := limits.Lookup{JS: js}
	if l, err := look.Limits(ctx, "alice"); err != nil || l.MaxQueued != limits.DefaultMaxQueued || l.ImageProblem("x") == "" {
		t.Fatalf("before any policy (no bucket): %+v, %v; want the defaults, no image", l, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	book, err := limits.Watch(wctx, js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-book.Done() })
	kv, err := limits.Setup(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limits.Change(ctx, kv, limits.Key("alice"), func(p *limits.Policy) { p.Images = append(p.Images, "alice/tools:1") }); err != nil {
		t.Fatal(err)
	}
	if _, err := limits.Change(ctx, kv, limits.DefaultKey, func(p *limits.Policy) { q := 5; p.MaxQueued = &q }); err != nil {
		t.Fatal(err)
	}
	if l, err := look.Limits(ctx, "alice"); err != nil || l.ImageProblem("alice/tools:1") != "" || l.MaxQueued != 5 {
		t.Fatalf("lookup after the policy: %+v, %v", l, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		l := book.For("alice")
		if l.ImageProblem("alice/tools:1") == "" && l.MaxQueued == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Book never saw the policy: %+v", l)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if bob := book.For("bob"); bob.ImageProblem("alice/tools:1") == "" {
		t.Fatal("bob may run alice's image")
	}
}
