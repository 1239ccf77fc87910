package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaDir is e31's published contract, read as any outside system would.
const schemaDir = "../../pkg/events/schema"

// e31URL is where the e31 under test listens; credsDir holds the
// credentials it made for this test's identities (submitter "billing",
// and the auditor, who may read the log).
var e31URL, credsDir string

// e31Bin is the e31 CLI, for the audit: a tool an outside system runs, not
// code it imports.
var e31Bin string

// TestMain builds the e31 binary and starts `e31 dev` as a separate
// process: the system under test, known to this package only by its
// address, like any e31 an upstream system talks to.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "e31-upstream-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "e31")
	e31Bin = bin
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../../cmd/e31"
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "upstream: build e31: %v\n%s", err, out)
		return 1
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr := l.Addr().String()
	l.Close()
	e31URL = "nats://" + addr
	credsDir = filepath.Join(dir, "state", "creds")
	cmd := exec.Command(bin, "dev", "--dir", filepath.Join(dir, "state"), "--listen", addr, "--users", "billing",
		"--nodes", "1", "--node-cpu", "4", "--executor", "process", "--sync", "interval", "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logs, err := os.Create(filepath.Join(dir, "e31.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "upstream: start e31 dev:", err)
		return 1
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	ready := make(chan bool)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "NATS JetStream listening") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			b, _ := os.ReadFile(logs.Name())
			fmt.Fprintf(os.Stderr, "upstream: e31 dev exited before it was ready\n%s", b)
			return 1
		}
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "upstream: e31 dev was not ready within a minute")
		return 1
	}
	code := m.Run()
	if code != 0 {
		b, _ := os.ReadFile(logs.Name())
		fmt.Fprintf(os.Stderr, "--- e31 dev's log:\n%s", b)
	}
	return code
}

// connect opens a plain NATS connection as identity, with the
// credentials e31 made for it. Replies (the PubAcks of JetStream) come to
// the one inbox prefix its permissions allow, read from its user JWT: an
// identity may subscribe to nothing else.
func connect(t *testing.T, identity string) *nats.Conn {
	t.Helper()
	file := filepath.Join(credsDir, identity+".creds")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("credentials of %s: %v", identity, err)
	}
	opts := []nats.Option{nats.UserCredentials(file)}
	if prefix := inboxPrefix(t, b); prefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(prefix))
	}
	nc, err := nats.Connect(e31URL, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", identity, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// inboxPrefix finds, in a NATS credentials file, the inbox its user may
// subscribe to: the allowed subscription "<prefix>.>" that starts with
// "_INBOX". The user JWT is base64url JSON (nats.permissions.sub.allow).
func inboxPrefix(t *testing.T, creds []byte) string {
	t.Helper()
	m := regexp.MustCompile(`-{3,}BEGIN NATS USER JWT-{3,}\s*(\S+)\s*-{3,}END NATS USER JWT-{3,}`).FindSubmatch(creds)
	if m == nil {
		t.Fatal("the credentials file has no user JWT")
	}
	parts := strings.Split(string(m[1]), ".")
	if len(parts) != 3 {
		t.Fatal("the user JWT is not header.claims.signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("the user JWT's claims: %v", err)
	}
	var claims struct {
		NATS struct {
			Sub struct {
				Allow []string `json:"allow"`
			} `json:"sub"`
		} `json:"nats"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatalf("the user JWT's claims: %v", err)
	}
	for _, s := range claims.NATS.Sub.Allow {
		if strings.HasPrefix(s, "_INBOX") && strings.HasSuffix(s, ".>") {
			return strings.TrimSuffix(s, ".>")
		}
	}
	return ""
}

// contract is what the published schemas say, as this package needs it.
type contract struct {
	schemas *jsonschema.Compiler
	// subject is the NATS subject template of a JobRequested, from
	// envelope.json's x-e31-subject: e31.job.{ce-subject}.requested.{submitter}.
	subject string
	// idPattern is what ce-id must look like for a JobRequested.
	idPattern *regexp.Regexp
}

// readContract loads every schema file and reads from envelope.json where
// a JobRequested goes and what its id is.
func readContract(t *testing.T) *contract {
	t.Helper()
	c := &contract{schemas: jsonschema.NewCompiler()}
	c.schemas.AssertFormat()
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in %s: %v", schemaDir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var meta struct {
			ID string `json:"$id"`
		}
		if err := json.Unmarshal(b, &meta); err != nil || meta.ID == "" {
			t.Fatalf("%s has no $id: %v", f, err)
		}
		if err := c.schemas.AddResource(meta.ID, doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(schemaDir, "envelope.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		AllOf []struct {
			Subject string `json:"x-e31-subject"`
			If      struct {
				Properties struct {
					Type struct {
						Const string `json:"const"`
					} `json:"ce-type"`
				} `json:"properties"`
			} `json:"if"`
			Then struct {
				Properties struct {
					ID struct {
						Pattern string `json:"pattern"`
					} `json:"ce-id"`
				} `json:"properties"`
			} `json:"then"`
		} `json:"allOf"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	for _, rule := range env.AllOf {
		if rule.If.Properties.Type.Const == "e31.job.requested.v1" {
			c.subject = rule.Subject
			c.idPattern = regexp.MustCompile(rule.Then.Properties.ID.Pattern)
		}
	}
	if c.subject == "" || c.idPattern == nil {
		t.Fatal("envelope.json does not say where a JobRequested goes or what its ce-id is")
	}
	return c
}

// validate checks v against the schema file name.
func (c *contract) validate(name string, v any) error {
	s, err := c.schemas.Compile("https://e31.dev/schema/" + name)
	if err != nil {
		return err
	}
	// The validator wants values as encoding/json decodes them.
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(doc)
}

// request is one JobRequested as this system builds it.
type request struct {
	job, submitter string
	body           []byte
	headers        map[string]string
}

// newRequest builds a JobRequested for job from body, with the headers
// envelope.json asks for.
func (c *contract) newRequest(job, submitter string, body []byte) request {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	id := job + "/requested"
	return request{job: job, submitter: submitter, body: body, headers: map[string]string{
		"ce-specversion": "1.0",
		"ce-type":        "e31.job.requested.v1",
		"ce-subject":     job,
		"ce-id":          id,
		"Nats-Msg-Id":    id,
		"ce-source":      "urn:example:upstream",
		"ce-time":        now,
		"content-type":   "application/json",
	}}
}

// natsSubject fills in the template from envelope.json.
func (c *contract) natsSubject(r request) string {
	return strings.NewReplacer("{ce-subject}", r.job, "{submitter}", r.submitter).Replace(c.subject)
}

// publish stores r in JetStream, only if the job has no events yet (as
// the README asks), and waits for the acknowledgement.
func publish(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, r request) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = r.body
	for k, v := range r.headers {
		m.Header.Set(k, v)
	}
	if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(0, "e31.job."+r.job+".>")); err != nil {
		t.Fatalf("publish %s: %v", r.job, err)
	}
}

// spec is a job that succeeds wherever it runs.
func spec(name string) map[string]any {
	return map[string]any{
		"name": name,
		"work": map[string]any{
			"command": []string{"/bin/sh", "-c", "echo hello from upstream > \"$E31_OUTPUT/hello.txt\""},
		},
		"request": map[string]any{"cpu": 0.25, "memory_bytes": 33554432, "gpu": 0, "disk_bytes": 1048576, "limit_seconds": 60},
		"output":  []map[string]any{{"path": "hello.txt", "required": true}},
	}
}

// answer is what e31 said about one job, read from the log.
type answer struct {
	submitted, rejected bool
	reason              string
	released            bool
	outcome             string
}

// follow reads e31's answers about jobs until want says it has enough.
func follow(ctx context.Context, t *testing.T, js jetstream.JetStream, want func(map[string]*answer) bool) map[string]*answer {
	t.Helper()
	got := map[string]*answer{}
	cons, err := js.OrderedConsumer(ctx, "E31", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"e31.job.*.submitted", "e31.job.*.rejected", "e31.job.*.released"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// One iterator, one consumer on the server: a reader that may not
	// delete consumers should not make a new one per message.
	iter, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for !want(got) {
		m, err := iter.Next()
		if err != nil {
			t.Fatalf("reading e31's answers: %v (context: %v)", err, ctx.Err())
		}
		job := m.Headers().Get("ce-subject")
		a := got[job]
		if a == nil {
			a = &answer{}
			got[job] = a
		}
		var body struct {
			Reason  string `json:"reason"`
			Outcome string `json:"outcome"`
			Final   bool   `json:"final"`
		}
		if err := json.Unmarshal(m.Data(), &body); err != nil {
			t.Fatalf("e31 wrote a body that is not JSON on %s: %v", m.Subject(), err)
		}
		switch m.Headers().Get("ce-type") {
		case "e31.job.submitted.v1":
			a.submitted = true
		case "e31.job.rejected.v1":
			a.rejected, a.reason = true, body.Reason
		case "e31.job.released.v1":
			if body.Final {
				a.released, a.outcome = true, body.Outcome
			}
		}
	}
	return got
}

// TestUpstreamPublisherIsAnsweredAndLosesNothing submits jobs the way a
// system outside e31 does, knowing only the published contract: valid
// requests, then malformed ones of every kind, then valid ones again. Each
// malformed request must be refused with a JobRejected that names what is
// wrong with it, and every valid request before and after it must be
// submitted, run and released.
func TestUpstreamPublisherIsAnsweredAndLosesNothing(t *testing.T) {
	c := readContract(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Publishing as the submitter; reading e31's answers as the auditor,
	// as a billing system allowed to read the log would.
	js, err := jetstream.New(connect(t, "billing"))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := jetstream.New(connect(t, "auditor"))
	if err != nil {
		t.Fatal(err)
	}
	const submitter = "billing"
	run := fmt.Sprintf("up%d", time.Now().UnixNano()%1e9)

	// The README's own example must be valid against the schemas it
	// points to: it is what an integrator copies first.
	readme, err := os.ReadFile(filepath.Join(schemaDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile(`(?s)'(\{"submitter".*?\})'`).FindSubmatch(readme)
	if example == nil {
		t.Fatal("the README has no example JobRequested body")
	}
	var exampleBody any
	if err := json.Unmarshal(example[1], &exampleBody); err != nil {
		t.Fatalf("the README's example body is not JSON: %v", err)
	}
	if err := c.validate("e31.job.requested.v1.json", exampleBody); err != nil {
		t.Errorf("the README's example body does not validate against e31.job.requested.v1.json: %v", err)
	}

	valid := func(prefix string, n int) []request {
		var out []request
		for i := range n {
			body := map[string]any{"submitter": submitter, "spec": spec(prefix)}
			if err := c.validate("e31.job.requested.v1.json", body); err != nil {
				t.Fatalf("our own request does not validate: %v", err)
			}
			b, _ := json.Marshal(body)
			r := c.newRequest(fmt.Sprintf("%s-%s-%02d", run, prefix, i), submitter, b)
			headers := map[string]any{}
			for k, v := range r.headers {
				headers[k] = v
			}
			if err := c.validate("envelope.json", headers); err != nil {
				t.Fatalf("our own headers do not validate: %v", err)
			}
			if !c.idPattern.MatchString(r.headers["ce-id"]) {
				t.Fatalf("our ce-id %q does not match %s", r.headers["ce-id"], c.idPattern)
			}
			out = append(out, r)
		}
		return out
	}
	before, after := valid("before", 10), valid("after", 10)

	// Malformed requests, each with what its rejection must mention. A
	// careful publisher validates first; these show what happens when one
	// does not; the schemas catch the first two.
	type bad struct {
		name    string
		r       request
		mention string
	}
	typo := map[string]any{"submitter": submitter, "spec": spec("typo")}
	typo["spec"].(map[string]any)["work"] = map[string]any{"comand": []string{"/bin/true"}}
	typoBody, _ := json.Marshal(typo)
	wrongType := map[string]any{"submitter": submitter, "spec": spec("wrong-type")}
	wrongType["spec"].(map[string]any)["request"].(map[string]any)["memory_bytes"] = "lots"
	wrongTypeBody, _ := json.Marshal(wrongType)
	noLimit := map[string]any{"submitter": submitter, "spec": spec("no-limit")}
	noLimit["spec"].(map[string]any)["request"].(map[string]any)["limit_seconds"] = 0
	noLimitBody, _ := json.Marshal(noLimit)
	bads := []bad{
		{"an unknown field", c.newRequest(run+"-typo", submitter, typoBody), "comand"},
		{"a string for a number", c.newRequest(run+"-wrong-type", submitter, wrongTypeBody), "memory_bytes"},
		{"not JSON at all", c.newRequest(run+"-not-json", submitter, []byte("submit this, please")), "invalid character"},
		{"a declaration e31 refuses", c.newRequest(run+"-no-limit", submitter, noLimitBody), "limit"},
	}
	// Not even an event: no CloudEvents headers at all, on a request
	// subject. It names a job, so the job is answered.
	garbage := c.newRequest(run+"-no-headers", submitter, []byte("hello?"))
	garbage.headers = map[string]string{}
	bads = append(bads, bad{"no headers at all", garbage, "ce-specversion"})
	for _, b := range bads[:2] {
		var v any
		if err := json.Unmarshal(b.r.body, &v); err == nil && c.validate("e31.job.requested.v1.json", v) == nil {
			t.Errorf("%s: the schema accepts a body e31 must refuse", b.name)
		}
	}

	for _, r := range before {
		publish(ctx, t, js, c.natsSubject(r), r)
	}
	for _, b := range bads {
		publish(ctx, t, js, c.natsSubject(b.r), b.r)
	}
	for _, r := range after {
		publish(ctx, t, js, c.natsSubject(r), r)
	}
	// A second request under an id that is taken cannot be answered on
	// that job's log (it is someone else's): e31 leaves the job alone.
	// The publish itself is refused here, by the expected-sequence check
	// the README asks for.
	taken := c.newRequest(before[0].job, submitter, before[0].body)
	taken.headers["Nats-Msg-Id"] = taken.job + "/requested-again"
	m := nats.NewMsg(c.natsSubject(taken))
	m.Data = taken.body
	for k, v := range taken.headers {
		m.Header.Set(k, v)
	}
	_, err = js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(0, "e31.job."+taken.job+".>"))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Errorf("a request under a used id was stored (err %v): the README's expected-sequence header should refuse it", err)
	}

	goods := append(append([]request(nil), before...), after...)
	got := follow(ctx, t, reader, func(got map[string]*answer) bool {
		for _, r := range goods {
			if a := got[r.job]; a == nil || !a.released {
				return false
			}
		}
		for _, b := range bads {
			if a := got[b.r.job]; a == nil || !a.rejected {
				return false
			}
		}
		return true
	})
	for _, r := range goods {
		if a := got[r.job]; !a.submitted || a.rejected || a.outcome != "succeeded" {
			t.Errorf("%s: %+v, want submitted, run and released as succeeded", r.job, *a)
		}
	}
	for _, b := range bads {
		a := got[b.r.job]
		if a.submitted || a.released {
			t.Errorf("%s (%s): %+v, want rejected and nothing else", b.r.job, b.name, *a)
		}
		if !strings.Contains(a.reason, b.mention) {
			t.Errorf("%s (%s): rejected with %q, which does not mention %q", b.r.job, b.name, a.reason, b.mention)
		}
		t.Logf("%s: rejected: %s", b.name, a.reason)
	}
	// What the malformed requests left in the log must not stop anyone
	// from auditing it.
	audit := exec.CommandContext(ctx, e31Bin, "audit", "--nats", e31URL, "--creds", filepath.Join(credsDir, "auditor.creds"))
	if out, err := audit.CombinedOutput(); err != nil {
		t.Errorf("e31 audit after malformed requests: %v\n%s", err, out)
	} else {
		t.Logf("%s", bytes.TrimSpace(out))
	}
	t.Logf("%d valid requests around %d malformed ones: every valid one released as succeeded, every malformed one rejected with its reason",
		len(goods), len(bads))
}
