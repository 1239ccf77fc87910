package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConnectSaysWhatWentWrong: a credentials file that is not one and a
// server that does not answer are told apart, for the CLI's exit codes
// and advice, and the messages say what was tried.
func TestConnectSaysWhatWentWrong(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.creds")
	if err := os.WriteFile(bad, []byte("not credentials"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Connect(context.Background(), Config{URL: "nats://127.0.0.1:1", Creds: bad})
	if !errors.Is(err, ErrCredentials) || errors.Is(err, ErrUnreachable) {
		t.Errorf("a file that holds no credentials: %v, want ErrCredentials", err)
	}
	_, err = Connect(context.Background(), Config{URL: "nats://127.0.0.1:1"})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "cannot reach NATS at nats://127.0.0.1:1") {
		t.Errorf("nothing listening: %v, want ErrUnreachable naming the URL", err)
	}
}

// TestAKindKeepsTheMessage: an error of a kind reads as its cause, and is
// both its kind and its cause to errors.Is.
func TestAKindKeepsTheMessage(t *testing.T) {
	t.Parallel()
	cause := errors.New(`"x" is not a job id`)
	err := kind(ErrInvalid, cause)
	if err.Error() != cause.Error() || !errors.Is(err, ErrInvalid) || !errors.Is(err, cause) || errors.Is(err, ErrFull) {
		t.Errorf("%v: is ErrInvalid %v, is its cause %v", err, errors.Is(err, ErrInvalid), errors.Is(err, cause))
	}
}
