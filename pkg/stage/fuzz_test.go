package stage

import (
	"testing"
)

// FuzzDecodeManifest feeds the manifest decoder what a hostile client could
// have stored as a folder's manifest: it must never panic, and every path it
// accepts must stay inside the folder it is written to.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"version":1,"files":[{"path":"a/b.txt","mode":"0644","size":3,"digest":"sha256:` + hex64 + `"}],"dirs":["c"]}`))
	f.Add([]byte(`{"version":1,"files":[{"path":"../etc/passwd","mode":"0644","size":3,"digest":"sha256:` + hex64 + `"}]}`))
	f.Add([]byte(`{"version":1,"files":[{"path":"/abs","mode":"0755","size":0,"digest":"sha256:` + hex64 + `"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		for _, it := range m.Files {
			if err := checkPath(it.Path); err != nil {
				t.Fatalf("accepted a manifest with an unsafe path %q", it.Path)
			}
		}
	})
}

const hex64 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
