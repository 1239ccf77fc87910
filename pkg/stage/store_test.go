package stage_test

import (
	"testing"

	"github.com/e31net/e31/pkg/stage/stagetest"
)

func TestObjectStoreContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stagetest.TestStore(t, e.store)
	// Nothing a refused put sent stays behind.
	assertNoStrayChunks(t, e)
}
