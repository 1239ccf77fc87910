package jobfile

import (
	"crypto/sha256"
	"fmt"
	"os"
	"testing"
	"time"
)

func FuzzSlow(f *testing.F) {
	f.Add([]byte(designExample))
	f.Fuzz(func(t *testing.T, src []byte) {
		name := fmt.Sprintf("/tmp/jf/slow-%x", sha256.Sum256(src))
		os.WriteFile(name+".pending", src, 0o644)
		start := time.Now()
		Parse("fuzz.yaml", src, "/fuzz")
		if el := time.Since(start); el > 500*time.Millisecond {
			os.WriteFile(fmt.Sprintf("%s-%dms", name, el.Milliseconds()), src, 0o644)
		}
		os.Remove(name + ".pending")
	})
}
