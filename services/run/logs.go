package run

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// flushLogs, every LogFlush until ctx ends, stores the job's output that
// fills a chunk of the head, and publishes what is new on subject, for
// `e31 logs --follow`: plain NATS, so that when no one follows it goes
// nowhere, and bounded (stage.RecentMax per stream and flush). A job that
// wrote nothing new costs nothing.
func (s *Service) flushLogs(ctx context.Context, logs *stage.JobLog, subject string, log *slog.Logger) {
	nc := s.js.Conn()
	tick := time.NewTicker(s.cfg.LogFlush)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range logs.Recent() {
			m := nats.NewMsg(subject)
			m.Header.Set(stage.LogStreamHeader, p.Stream)
			m.Header.Set(stage.LogOffsetHeader, strconv.FormatInt(p.Offset, 10))
			m.Data = p.Bytes
			if err := nc.PublishMsg(m); err != nil {
				log.Debug("publishing the job's output", "err", err)
			}
		}
		if err := logs.Flush(ctx, false); err != nil && ctx.Err() == nil {
			log.Warn("storing the job's output so far", "err", err)
		}
	}
}

// storeLogs stores the rest of what the job wrote, and marks its log
// complete, on every path the job ran (also when the node stops: ctx is
// not the job's, which a shutdown ends), and returns what RunStopped says
// of it.
func (s *Service) storeLogs(ctx context.Context, logs *stage.JobLog, log *slog.Logger) *events.Logs {
	storeCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := again(storeCtx, log, "storing the job's logs", tryLogs, func(ctx context.Context) error { return logs.Flush(ctx, true) }); err != nil {
		log.Warn("storing the job's logs", "err", err)
	}
	stdout, stderr, truncated := logs.Counts()
	return &events.Logs{StdoutBytes: stdout, StderrBytes: stderr, Truncated: truncated}
}
