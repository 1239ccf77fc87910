package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// client is a CLI command's connection to e31.
type client struct {
	a  *app
	nc *nats.Conn
	js jetstream.JetStream
}

// dial connects, failing fast with advice when nothing answers.
func (a *app) dial(ctx context.Context) (*client, error) {
	cfg := a.connectConfig("e31-cli")
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(orDefault(cfg.URL, connect.DefaultURL), natsOptions(cfg)...)
	if err != nil {
		return nil, troubleErr(fmt.Errorf("cannot reach NATS at %s: %v (is 'e31 dev' running? set --nats or E31_NATS)", orDefault(cfg.URL, connect.DefaultURL), err))
	}
	js, err := connect.Ready(dctx, nc)
	if err != nil {
		nc.Close()
		return nil, troubleErr(fmt.Errorf("NATS at %s does not answer JetStream requests: %w", nc.ConnectedUrl(), err))
	}
	return &client{a: a, nc: nc, js: js}, nil
}

func natsOptions(cfg connect.Config) []nats.Option {
	opts := []nats.Option{nats.Name(cfg.Name), nats.Timeout(5 * time.Second)}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	return opts
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *client) close() { c.nc.Close() }

// request sends a query and decodes the reply.
func (c *client) request(ctx context.Context, subject string, req, reply any, timeout time.Duration) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, subject, b)
	if errors.Is(err, nats.ErrNoResponders) {
		return troubleErr(fmt.Errorf("nothing answers %s: is the %s service running?", subject, serviceOf(subject)))
	}
	if err != nil {
		return troubleErr(fmt.Errorf("%s: %w", subject, err))
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return troubleErr(fmt.Errorf("%s: bad reply: %w", subject, err))
	}
	return nil
}

func serviceOf(subject string) string {
	switch subject {
	case api.RentWhy:
		return "rent"
	}
	return "ledger"
}

// lastSeq is the log's last sequence now: a read that waits for the ledger
// to reach it sees everything that happened before the read.
func (c *client) lastSeq(ctx context.Context) (uint64, error) {
	st, err := c.js.Stream(ctx, events.Stream)
	if err != nil {
		return 0, troubleErr(fmt.Errorf("the event log: %w", err))
	}
	return st.CachedInfo().State.LastSeq, nil
}

// record returns a job's hold record as of at least minSeq.
func (c *client) record(ctx context.Context, job string, minSeq uint64) (*api.HoldRecord, error) {
	var reply api.RecordReply
	if err := c.request(ctx, api.LedgerRecord, api.RecordRequest{Job: job, MinSeq: minSeq, Wait: 10 * time.Second}, &reply, 15*time.Second); err != nil {
		return nil, err
	}
	if reply.Error != "" {
		return nil, errors.New(reply.Error)
	}
	return reply.Record, nil
}

// currentRecord reads a job's record including everything logged so far.
func (c *client) currentRecord(ctx context.Context, job string) (*api.HoldRecord, error) {
	if !events.ValidID(job) {
		return nil, usageErr("%q is not a job id", job)
	}
	seq, err := c.lastSeq(ctx)
	if err != nil {
		return nil, err
	}
	return c.record(ctx, job, seq)
}

// why asks the scheduler about a job, as of at least minSeq.
func (c *client) why(ctx context.Context, job string, minSeq uint64) (api.WhyReply, error) {
	var reply api.WhyReply
	if err := c.request(ctx, api.RentWhy, api.WhyRequest{Job: job, MinSeq: minSeq}, &reply, 8*time.Second); err != nil {
		return reply, err
	}
	if reply.Error != "" {
		return reply, errors.New(reply.Error)
	}
	return reply, nil
}

func (c *client) store(ctx context.Context) (stage.Store, error) {
	// The CLI uses its own user's store; it may create it where the user is
	// allowed to (e31 dev without credentials), otherwise the bucket is made
	// with the user's credentials.
	s, err := stage.NewTenants(c.js, true).For(ctx, c.a.env.User)
	if err != nil {
		return nil, troubleErr(fmt.Errorf("the data store of %s: %w", c.a.env.User, err))
	}
	return s, nil
}

// follow calls fn with each of a job's events, from its first, until fn
// returns false or ctx ends. It waits for new events as they are logged.
func (c *client) follow(ctx context.Context, filter string, fn func(events.Envelope) bool) error {
	cons, err := c.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return troubleErr(fmt.Errorf("follow %s: %w", filter, err))
	}
	iter, err := cons.Messages()
	if err != nil {
		return troubleErr(fmt.Errorf("follow %s: %w", filter, err))
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return troubleErr(fmt.Errorf("follow %s: %w", filter, err))
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			continue
		}
		if md, err := m.Metadata(); err == nil {
			env.Seq = md.Sequence.Stream
		}
		if !fn(env) {
			return nil
		}
	}
}

// waitOver follows a job until it is over and returns its last event.
func (c *client) waitOver(ctx context.Context, job string) (events.Envelope, error) {
	var last events.Envelope
	err := c.follow(ctx, events.JobSubject(job), func(env events.Envelope) bool {
		last = env
		return !events.Terminal(env.Event)
	})
	return last, err
}

// jobEvents reads a job's events as they are now.
func (c *client) jobEvents(ctx context.Context, job string) ([]events.Envelope, error) {
	return bus.ReadJob(ctx, c.js, job, 1)
}

// inLog reports whether the log holds any event of job: a job the ledger has
// no record of yet (its request could not be read) may still be answered.
func (c *client) inLog(ctx context.Context, job string) bool {
	if !events.ValidID(job) {
		return false
	}
	st, err := c.js.Stream(ctx, events.Stream)
	if err != nil {
		return false
	}
	_, err = st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(events.JobSubject(job)))
	return err == nil
}
