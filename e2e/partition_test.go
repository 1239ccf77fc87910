package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
)

// jobImage is the image the partition tests' container jobs run: the
// e2e build context (busybox and e31, FROM scratch), built locally.
const jobImage = "e31-e2e-job:latest"

var (
	jobImageOnce sync.Once
	jobImageErr  error
)

// buildJobImage builds jobImage once per test binary.
func buildJobImage(t *testing.T) {
	t.Helper()
	jobImageOnce.Do(func() {
		if out, err := exec.Command("docker", "build", "-q", "-t", jobImage, buildDir).CombinedOutput(); err != nil {
			jobImageErr = fmt.Errorf("docker build %s: %v\n%s", jobImage, err, out)
		}
	})
	if jobImageErr != nil {
		t.Fatal(jobImageErr)
	}
}

// partitionJob is a job whose first attempt runs until it is stopped, and
// every later one for a second and a half, then succeeds: long enough for
// the process table to show it. With image, it runs as a container.
func partitionJob(t *testing.T, image string) events.JobSpec {
	t.Helper()
	cmd := tracedCommand(`if [ "$E31_ATTEMPT" = 1 ]; then sleep 600; fi; sleep 1.5; echo ok > "$E31_OUTPUT/ok.txt"`)
	src := fmt.Sprintf("name: partition\nwork:\n  command: [%q, %q, %q]\n  env: {PATH: /usr/bin:/bin}\n", cmd[0], cmd[1], cmd[2])
	if image != "" {
		src += "  image: " + image + "\n"
	}
	src += "request: {cpu: 0.5, memory: 64MiB, disk: 1MiB, limit: 5m}\noutput: [ok.txt]\n"
	job, err := jobfile.Parse("partition.yaml", []byte(src), "")
	if err != nil {
		t.Fatalf("partition job: %v\n%s", err, src)
	}
	return job.Spec
}

// TestACutOffNodeStopsItsJobsBeforeTheyAreHeldAgain cuts a run node from
// NATS while it runs two jobs, one in the sandbox and one in a container,
// with a real fault injector between them (Toxiproxy, in the test's
// process), in both ways a network fails: the connection closed, and
// packets dropped while the connection stays open. The node must stop
// both jobs on its own clock before its lease lapses; RENT must hold them
// again on the other node only after that; by the process table, the two
// attempts of each job never run at once. Nothing of the lost attempts
// reaches the log, their workspaces are gone while the node is still cut
// off, the node joins again as a new boot once the network heals, every
// job ends once, and the audit passes.
func TestACutOffNodeStopsItsJobsBeforeTheyAreHeldAgain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the sandbox, and reading every process's command line")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skip("needs a Docker engine for the container job")
	}
	buildJobImage(t)
	for _, cut := range []string{"closed", "silent"} {
		t.Run(cut, func(t *testing.T) {
			t.Parallel()
			partitionNode(t, cut)
		})
	}
}

func partitionNode(t *testing.T, cut string) {
	const leaseTTL = 3 * time.Second // fence 750 ms: SIGKILL by 2.625 s; lapse margin 600 ms
	sys := startSystem(t, systemOptions{
		instances: map[string]int{"submit": 1, "rent": 1, "output": 1, "release": 1, "ledger": 1},
		leaseTTL:  leaseTTL,
		setup:     []string{"--allow-image", jobImage},
	})
	_, js := sys.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	procs := watchProcs(t, 10*time.Millisecond)

	// The node that is cut off reaches NATS only through the proxy.
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(srv, "run-cut", fmt.Sprintf("127.0.0.1:%d", freePort(t)), strings.TrimPrefix(sys.url, "nats://"))
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	node := func(name, url string) *proc {
		work := filepath.Join(sys.dir, name)
		p := startProc(t, sys.dir, name, e31Bin, "serve", "run", "--nats", url, "--log-level", "info",
			"--node", name, "--node-cpu", "2", "--node-memory", "1GiB", "--node-disk", "1GiB",
			"--executor", "sandbox", "--work-dir", work, "--grace", "1s")
		nextEvent(ctx, t, js, "e31.node."+name+".>", func(env events.Envelope) bool {
			_, ok := env.Event.(*events.NodeAnnounced)
			return ok
		})
		return p
	}
	cutNode := node("run-cut", "nats://"+proxy.Listen)

	ids := []string{cut + "-sandbox", cut + "-container"}
	submitAll(ctx, t, js, "partition", partitionJob(t, ""), ids[:1])
	submitAll(ctx, t, js, "partition", partitionJob(t, jobImage), ids[1:])
	for _, id := range ids {
		procs.waitRunning(ctx, t, id, 1)
	}
	// The other node joins only now, so that the first attempts ran on
	// the node cut off.
	node("run-far", sys.url)

	cutAt := time.Now()
	switch cut {
	case "closed":
		proxy.Stop()
	case "silent":
		for _, stream := range []string{"upstream", "downstream"} {
			toxic := fmt.Sprintf(`{"name": "drop-%s", "type": "timeout", "stream": %q, "attributes": {"timeout": 0}}`, stream, stream)
			if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left := waitOver(ctx, js, ids, t.Logf); len(left) > 0 {
		t.Fatalf("jobs not over after the cut: %v", left)
	}
	over := time.Since(cutAt)

	// Still cut off: the lost attempts' workspaces are gone, and nothing
	// of them is in the log but their hold, start, loss and release.
	work := filepath.Join(sys.dir, "run-cut", "jobs")
	if ents, err := os.ReadDir(work); err == nil {
		for _, e := range ents {
			for _, id := range ids {
				if strings.HasPrefix(e.Name(), id) {
					t.Errorf("the cut-off node left the workspace %s", e.Name())
				}
			}
		}
	}
	rep := readLog(ctx, t, js)
	for _, id := range ids {
		j := rep.jobs[id]
		a1, a2 := j.attempts[1], j.attempts[2]
		if a1 == nil || a2 == nil {
			t.Fatalf("job %s: attempts %v, want 1 lost on run-cut and 2 on run-far\n  %s", id, j.attempts, strings.Join(j.trail, "\n  "))
		}
		if a1.node != "run-cut" || a1.lost != 1 || a1.stopped != 0 || a1.returned != 0 || a2.node != "run-far" || j.outcome != events.Succeeded {
			t.Errorf("job %s: attempt 1 on %s lost %d, stopped %d, returned %d; attempt 2 on %s; outcome %s; want 1 lost on run-cut with nothing else recorded, 2 succeeded on run-far\n  %s",
				id, a1.node, a1.lost, a1.stopped, a1.returned, a2.node, j.outcome, strings.Join(j.trail, "\n  "))
		}
	}

	// Healed: the node joins again as a new boot, and what it kept of the
	// lost attempts is not recorded.
	healAt := time.Now()
	switch cut {
	case "closed":
		if err := proxy.Start(); err != nil {
			t.Fatal(err)
		}
	case "silent":
		for _, stream := range []string{"upstream", "downstream"} {
			if err := proxy.Toxics.RemoveToxic(ctx, "drop-"+stream); err != nil {
				t.Fatal(err)
			}
		}
	}
	boots := 0
	nextEvent(ctx, t, js, "e31.node.run-cut.>", func(env events.Envelope) bool {
		if _, ok := env.Event.(*events.NodeAnnounced); ok {
			boots++
		}
		return boots == 2
	})
	rejoined := time.Since(healAt)
	for cutNode.logHas("its result is not recorded") < len(ids) {
		select {
		case <-ctx.Done():
			t.Fatalf("the cut-off node never tried to record its lost attempts after it joined again")
		case <-time.After(50 * time.Millisecond):
		}
	}
	s := checkNothingLost(ctx, t, js, ids, "")
	auditPasses(t, sys.url)
	if crashed := sys.crashed(); len(crashed) > 0 || cutNode.exited() {
		t.Errorf("services exited on their own: %v (run-cut exited: %v)", crashed, cutNode.exited())
	}

	// The process table's word: when each attempt ran.
	gaps := procs.overlaps(t, ids)
	for i, id := range ids {
		s1, _ := procs.span(id, 1)
		s2, _ := procs.span(id, 2)
		lost := rep.jobs[id].attempts[1].lostAt
		t.Logf("%s cut, %s: attempt 1 seen until %s after the cut, %s before RENT gave it up; attempt 2 seen from %s after the cut: a gap of %s",
			cut, id, s1.last.Sub(cutAt).Round(time.Millisecond), lost.Sub(s1.last).Round(time.Millisecond),
			s2.first.Sub(cutAt).Round(time.Millisecond), gaps[i].Round(time.Millisecond))
		if !s1.last.Before(lost) {
			t.Errorf("%s: attempt 1 ran until %s, after RENT gave it up at %s", id, s1.last.Format("15:04:05.000"), lost.Format("15:04:05.000"))
		}
	}
	t.Logf("%s cut: both jobs over %s after it; the node joined again %s after the heal; %s", cut, over.Round(time.Millisecond), rejoined.Round(time.Millisecond), s)
}
