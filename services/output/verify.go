package output

import (
	"context"
	"errors"
	"fmt"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// StoreVerifier checks returned files against the store they were put in.
type StoreVerifier struct{ Store stage.Store }

// VerifyFile implements Verifier: missing or not matching its digest is
// ErrDamaged; anything else (the store did not answer) is retried.
func (v StoreVerifier) VerifyFile(ctx context.Context, f events.OutputFile) error {
	err := stage.Verify(ctx, v.Store, events.DataRef{Name: f.Path, Digest: f.Digest, Kind: "file", Bytes: f.Bytes})
	for _, damage := range []error{stage.ErrNotFound, stage.ErrCorrupt, stage.ErrBadRef} {
		if errors.Is(err, damage) {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
	}
	return err
}
