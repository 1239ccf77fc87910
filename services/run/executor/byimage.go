package executor

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/e31net/e31/pkg/events"
)

// ByImage is an Executor that picks one of two for each job by whether it
// names an image: a job that does runs in containers, any other in plain
// (on a node, the sandbox). A node without a container engine has no
// containers executor, and refuses jobs that name an image.
type ByImage struct {
	plain      Executor
	containers Executor
}

var (
	_ Executor = (*ByImage)(nil)
	_ Isolator = (*ByImage)(nil)
)

// NewByImage returns the executor that runs jobs naming an image with
// containers (nil: none here) and the others with plain.
func NewByImage(plain, containers Executor) *ByImage {
	return &ByImage{plain: plain, containers: containers}
}

// Isolation implements Isolator: the plain executor's, the weaker of the
// two.
func (b *ByImage) Isolation() events.Isolation { return Isolation(b.plain) }

// IsolationOf implements Isolator: a job that names an image runs in a
// container, any other as the plain executor runs it.
func (b *ByImage) IsolationOf(spec Spec) events.Isolation {
	if spec.Image != "" {
		return events.IsolationContainer
	}
	return IsolationOf(b.plain, spec)
}

// Close closes the executors that have a Close (the sandbox gives back its
// slots and the node's job disk).
func (b *ByImage) Close() error {
	var errs []error
	for _, e := range []Executor{b.plain, b.containers} {
		if c, ok := e.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// LimitsDevices implements DeviceLimiter: what the executor of jobs that
// name no image says (the container engine keeps a container to the
// devices it was asked for).
func (b *ByImage) LimitsDevices() bool { return LimitsDevices(b.plain) }

// Containers reports whether jobs that name an image can run here.
func (b *ByImage) Containers() bool { return b.containers != nil }

// Prepare implements Executor with the executor the job's image picks; the
// handle it returns runs and releases the job there.
func (b *ByImage) Prepare(ctx context.Context, spec Spec) (Job, error) {
	if spec.Image == "" {
		return b.plain.Prepare(ctx, spec)
	}
	if b.containers == nil {
		return nil, fmt.Errorf("executor: job %s names image %s, and this node has no container engine", spec.JobID, spec.Image)
	}
	return b.containers.Prepare(ctx, spec)
}
