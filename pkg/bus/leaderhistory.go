package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// maxLeaderHistory bounds how many messages LeaderHistory reads: a job
// has a dozen events, and a job a tenant flooded with junk is read by
// ReadHistory, not asked of the leader a message at a time.
const maxLeaderHistory = 4096

// LeaderHistory is ReadHistory as the log's leader says, one message a
// request: for a reader that learned from the leader that a job's log
// holds a message a direct get did not return. Direct gets are answered
// by any replica, and one that lags (a server back from a restart or a
// partition, catching up) holds only the first part of the log: a gate
// that asked it whether an attempt was held on a node was told no about
// an attempt held a moment before, and refused the node its output.
func LeaderHistory(ctx context.Context, js jetstream.JetStream, job string, from uint64) (History, error) {
	var h History
	seq := max(from, 1)
	for range maxLeaderHistory {
		m, err := LeaderNext(ctx, js, events.Stream, events.JobSubject(job), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return h, nil
		}
		if err != nil {
			return History{}, fmt.Errorf("read job %s from the leader: %w", job, err)
		}
		h.Last, seq = m.Sequence, m.Sequence+1
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			if !events.IsUnknownType(err) {
				h.SetAside++
			}
			continue
		}
		env.Seq = m.Sequence
		h.Events = append(h.Events, env)
	}
	return History{}, fmt.Errorf("read job %s from the leader: more than %d messages from #%d", job, maxLeaderHistory, from)
}
