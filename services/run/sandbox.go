package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/container"
	"github.com/e31net/e31/services/run/executor/sandbox"
)

// LabelContainers is the node label that says the node runs jobs that name
// an image; RENT holds such jobs only on nodes that carry it.
const LabelContainers = "containers"

// openSandbox returns the sandbox executor, with the container executor for
// jobs that name an image when a Docker engine answers. A host that cannot
// sandbox gets an error wrapping ErrNoIsolation: never jobs unisolated.
func openSandbox(root string, diskBytes int64, log *slog.Logger, images container.Images) (executor.Executor, error) {
	sb, err := sandbox.New(sandbox.Config{Root: root, DiskBytes: diskBytes, Logger: log})
	if err != nil {
		if errors.Is(err, sandbox.ErrNotSupported) {
			return nil, noIsolation(err)
		}
		return nil, fmt.Errorf("run: %w", err)
	}
	r := &byImage{plain: sb}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ce, err := container.New(ctx, container.Config{Root: root, DiskBytes: diskBytes, UIDBase: 3000000, Logger: log, Images: images}); err == nil {
		r.containers = ce
		log.Info("jobs that name an image run as containers")
	} else {
		log.Info("no container engine: jobs that name an image are not held here", "why", err)
	}
	return r, nil
}

// byImage runs jobs that name an image as containers, the others in the
// sandbox.
type byImage struct {
	plain      executor.Executor
	containers executor.Executor
}

var _ executor.Isolator = (*byImage)(nil)

// Isolation implements executor.Isolator: the sandbox's, the weaker of the
// two.
func (b *byImage) Isolation() events.Isolation { return executor.Isolation(b.plain) }

// IsolationOf implements executor.Isolator: a job that names an image runs
// in a container, any other in the sandbox.
func (b *byImage) IsolationOf(spec executor.Spec) events.Isolation {
	if spec.Image != "" {
		return events.IsolationContainer
	}
	return executor.IsolationOf(b.plain, spec)
}

// Close closes the executors that have a Close (the sandbox gives back its
// slots and the node's job disk).
func (b *byImage) Close() error {
	var errs []error
	for _, e := range []executor.Executor{b.plain, b.containers} {
		if c, ok := e.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Containers reports whether jobs that name an image can run here.
func (b *byImage) Containers() bool { return b.containers != nil }

func (b *byImage) pick(spec executor.Spec) (executor.Executor, error) {
	if spec.Image == "" {
		return b.plain, nil
	}
	if b.containers == nil {
		return nil, fmt.Errorf("run: job %s names image %s, and this node has no container engine", spec.JobID, spec.Image)
	}
	return b.containers, nil
}

// Prepare implements executor.Executor.
func (b *byImage) Prepare(ctx context.Context, spec executor.Spec) (*executor.Workspace, error) {
	e, err := b.pick(spec)
	if err != nil {
		return nil, err
	}
	return e.Prepare(ctx, spec)
}

// Run implements executor.Executor.
func (b *byImage) Run(ctx context.Context, ws *executor.Workspace) (executor.Result, error) {
	e, err := b.pick(ws.Spec)
	if err != nil {
		return executor.Result{}, err
	}
	return e.Run(ctx, ws)
}
