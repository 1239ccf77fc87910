package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/query/wire"
)

// startNATS starts what an e31 system's NATS is, in this process: a
// JetStream server with the event log set up (e31's services set it up
// when they start). It returns the server's URL and how to stop it.
func startNATS() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "e31-example")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := broker.Start(broker.Config{Dir: dir, Sync: broker.SyncInterval, Name: "example"})
	if err != nil {
		log.Fatal(err)
	}
	stop = func() {
		_ = srv.Shutdown(context.Background())
		_ = os.RemoveAll(dir)
	}
	nc, err := srv.Connect("setup")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if err := events.Setup(context.Background(), js, events.StreamOptions{}); err != nil {
		log.Fatal(err)
	}
	return srv.ClientURL(), stop
}

// A job that reads a folder of local data: Submit uploads the folder into
// the submitter's data store and writes the job's request into the log.
// With no service running here, the request is all the log holds, and
// reading it back shows what was submitted; on a running system, Wait and
// Output would follow (see their examples).
func Example() {
	url, stop := startNATS()
	defer stop()
	ctx := context.Background()

	c, err := client.Connect(ctx, client.Config{URL: url, User: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	clips, err := os.MkdirTemp("", "clips")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(clips)
	if err := os.WriteFile(filepath.Join(clips, "a.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	job, err := jobfile.Parse("job.yaml", fmt.Appendf(nil, `
work: {command: [/bin/sh, -c, "wc -l < /data/clips/a.txt > /out/count.txt"]}
data: [{name: clips, path: %q}]
request: {cpu: 0.5, memory: 64MiB, limit: 1m}
output: [count.txt]
`, clips), "")
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Submit(ctx, job, nil)
	if err != nil {
		log.Fatal(err)
	}

	err = c.Follow(ctx, events.JobSubject(id), func(env events.Envelope) bool {
		req := env.Event.(*events.JobRequested)
		fmt.Println(events.Name(env.Type), "by", req.Submitter, "reading", req.Spec.Data[0].Name)
		return false
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: JobRequested by alice reading clips
}

// Connect with the credentials of a deployed system, or with none on the
// machine where `e31 dev` runs: it wrote the OS user's, and noted where.
func ExampleConnect() {
	configDir, _ := os.UserConfigDir()
	c, err := client.Connect(context.Background(), client.Config{
		URL:       "nats://127.0.0.1:4222",
		Creds:     os.Getenv("E31_CREDS"), // "" looks for e31 dev's
		User:      "alice",
		ConfigDir: configDir,
	})
	if errors.Is(err, client.ErrUnreachable) {
		log.Fatal("is e31 dev running? ", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("connected as", c.Who())
}

// Wait for a job and fetch its output: Wait returns the hold record once
// the job's compute is released, and Output writes the files it returned,
// each checked against its digest.
func ExampleClient_Wait() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	id := "0193a0c4-7d2e-7b31-9f00-3b7c1d2e4f50"
	rec, err := c.Wait(ctx, id, 10*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if rec.Outcome != events.Succeeded {
		log.Fatalf("job %s: %s: %s; stderr ends with %q", id, rec.Outcome, rec.Reason, c.StderrTail(ctx, rec, 10))
	}
	if err := c.Output(ctx, rec, "out", nil); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d file(s) written to out; %.3f cpu-core-seconds held\n", rec.Output.Files, rec.CPUCoreSeconds)
}

// Follow a job's stdout and stderr as it runs.
func ExampleClient_Logs() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Logs(ctx, "0193a0c4-7d2e-7b31-9f00-3b7c1d2e4f50", client.LogsOptions{Follow: true, Stdout: os.Stdout, Stderr: os.Stderr})
	var partial *client.PartialLogsError
	if errors.As(err, &partial) {
		fmt.Fprintln(os.Stderr, "not all of it:", partial)
	} else if err != nil {
		log.Fatal(err)
	}
}

// What each submitter would be billed for November, and every record of
// one submitter, as of everything logged so far.
func ExampleClient_Totals() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	totals, behind, err := c.Totals(ctx, wire.TotalsRequest{Since: nov, Until: nov.AddDate(0, 1, 0)})
	if err != nil {
		log.Fatal(err)
	}
	if behind.Partial() {
		fmt.Println("the ledger is still catching up: these may not count everything")
	}
	for _, t := range totals {
		fmt.Printf("%s: %d jobs, %.0f cpu-core-seconds\n", t.Submitter, t.Jobs, t.CPUCoreSeconds)
	}
	recs, err := c.AllRecords(ctx, wire.ListRequest{Submitter: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(recs), "records of alice")
}

// Rebuild every record from the log and compare with the ledger's (the
// auditor's or the operator's credentials).
func ExampleClient_Audit() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{Creds: "auditor.creds"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Audit(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Summary())
	if !rep.OK() {
		os.Exit(1)
	}
}

func ExampleHumanBytes() {
	fmt.Println(client.HumanBytes(512), client.HumanBytes(1536), client.HumanBytes(3<<30))
	// Output: 512 B 1.5 KiB 3 GiB
}

func ExampleSummarize() {
	recs := []*hold.HoldRecord{
		{Job: "s-0", State: hold.StateReleased, Outcome: events.Succeeded, HeldSeconds: 1.5},
		{Job: "s-1", State: hold.StateReleased, Outcome: events.Failed, HeldSeconds: 2},
		{Job: "s-2", State: hold.StateWaiting},
	}
	s := client.Summarize("s", recs)
	fmt.Println(s.Jobs, s.States, s.Outcomes, s.HeldSeconds)
	// Output: 3 map[released:2 waiting:1] map[failed:1 succeeded:1] 3.5
}
