package executor

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The one rule of a job's environment, whichever executor runs it: what
// it declares, then PATH, HOME and TMPDIR unless declared, then its own
// E31_ variables, which no declaration overrides; each name once, sorted.
func TestEnvironDeclaredThenDefaultsThenE31(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		at   Places
		want []string
	}{
		{"nothing declared", nil, Inside, []string{"E31_DATA=/data", "E31_JOB_ID=j1", "E31_OUTPUT=/out",
			"HOME=/tmp", "PATH=" + DefaultPath, "TMPDIR=/tmp"}},
		{"declared PATH, HOME and LANG", map[string]string{"PATH": "/opt/bin", "HOME": "/home/me", "LANG": "C"}, Inside,
			[]string{"E31_DATA=/data", "E31_JOB_ID=j1", "E31_OUTPUT=/out", "HOME=/home/me", "LANG=C", "PATH=/opt/bin", "TMPDIR=/tmp"}},
		{"E31_ cannot be spoofed", map[string]string{"E31_JOB_ID": "other", "E31_DATA": "/etc", "E31_OUTPUT": "/"}, Inside,
			[]string{"E31_DATA=/data", "E31_JOB_ID=j1", "E31_OUTPUT=/out", "HOME=/tmp", "PATH=" + DefaultPath, "TMPDIR=/tmp"}},
		{"a plain process: host paths, no TMPDIR", nil, Places{Data: "/w/data", Out: "/w/out", Home: "/w"},
			[]string{"E31_DATA=/w/data", "E31_JOB_ID=j1", "E31_OUTPUT=/w/out", "HOME=/w", "PATH=" + DefaultPath}},
	} {
		got := Environ(Spec{JobID: "j1", Env: tt.env}, tt.at)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Environ = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := SearchPath(Spec{}); !slices.Equal(got, filepath.SplitList(DefaultPath)) {
		t.Errorf("SearchPath of no PATH = %q", got)
	}
	if got := SearchPath(Spec{Env: map[string]string{"PATH": "/opt/bin:/bin"}}); !slices.Equal(got, []string{"/opt/bin", "/bin"}) {
		t.Errorf("SearchPath of a declared PATH = %q", got)
	}
}

// A plain process sees the environment Environ gives it, host paths and
// all, and nothing of the node's own.
func TestProcessSeesItsEnvironment(t *testing.T) {
	t.Setenv("E31_NODE_SECRET", "leaked")
	p, err := NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	j, err := p.Prepare(context.Background(), Spec{JobID: "env", Attempt: 1, Command: []string{"/usr/bin/env"},
		Env: map[string]string{"LANG": "C", "E31_JOB_ID": "spoofed"}, Limit: time.Minute, Grace: time.Second,
		Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := j.Release(); err != nil {
			t.Errorf("release the job: %v", err)
		}
	}()
	if _, err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := j.Dirs()
	want := Environ(Spec{JobID: "env", Env: map[string]string{"LANG": "C"}}, Places{Data: d.DataDir, Out: d.OutDir, Home: d.Root})
	got := strings.Fields(out.String())
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the job saw %q, want %q", got, want)
	}
}
