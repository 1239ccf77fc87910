package stage

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// HashCache remembers what hashing found of the files of a folder that is
// uploaded again and again (a job's checkpoint, saved every few minutes),
// so that each upload hashes only the files that changed since: a file
// whose size, inode, modification and change times are those it had when
// it was hashed is taken to hold the same bytes. A read-only btrfs
// snapshot keeps its files' inodes and times, so the files of successive
// snapshots of one folder match too.
//
// A file changed within a moment of being hashed may keep its times (the
// kernel's clock ticks in milliseconds): like git's racy index entries,
// such a file is hashed again next time rather than trusted. All methods
// may be called concurrently.
type HashCache struct {
	mu sync.Mutex
	m  map[string]cachedHash // by absolute path within the folder, relative
}

type cachedHash struct {
	size, mtime, ctime int64
	ino                uint64
	h                  hashed
}

// racyWindow is how close to its hashing a file's change must be for its
// entry not to be trusted.
const racyWindow = 2 * time.Second

// NewHashCache returns an empty cache.
func NewHashCache() *HashCache { return &HashCache{m: map[string]cachedHash{}} }

// UploadCached is Upload of a folder with c remembering its files'
// digests: a file that did not change since the last upload through c is
// not read again.
func UploadCached(ctx context.Context, s Store, localPath string, p Progress, c *HashCache) (events.DataRef, error) {
	p = orNone(p)
	fi, err := os.Stat(localPath)
	if err != nil {
		return events.DataRef{}, fmt.Errorf("upload %s: %w", localPath, err)
	}
	if !fi.IsDir() {
		return Upload(ctx, s, localPath, p)
	}
	ref, err := uploadDir(ctx, s, localPath, p, c)
	if err != nil {
		return events.DataRef{}, fmt.Errorf("upload %s: %w", localPath, err)
	}
	return ref, nil
}

// stamp is what the cache compares of a file.
func stamp(fi os.FileInfo) (cachedHash, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return cachedHash{}, false
	}
	return cachedHash{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ctime: time.Unix(st.Ctim.Unix()).UnixNano(), ino: st.Ino}, true
}

// lookup returns the digest of the file rel, open as f, if it is known and
// the file is as it was then.
func (c *HashCache) lookup(rel string, f *os.File) (hashed, bool) {
	if c == nil {
		return hashed{}, false
	}
	fi, err := f.Stat()
	if err != nil {
		return hashed{}, false
	}
	now, ok := stamp(fi)
	if !ok {
		return hashed{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	was, ok := c.m[rel]
	if !ok || was.size != now.size || was.mtime != now.mtime || was.ctime != now.ctime || was.ino != now.ino {
		return hashed{}, false
	}
	return was.h, true
}

// remember keeps the digest of the file rel, open as f and hashed at
// hashedAt, unless it changed too close to then to be trusted later.
func (c *HashCache) remember(rel string, f *os.File, h hashed, hashedAt time.Time) {
	if c == nil {
		return
	}
	fi, err := f.Stat()
	if err != nil {
		return
	}
	now, ok := stamp(fi)
	if !ok || now.size != h.size {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hashedAt.UnixNano()-max(now.mtime, now.ctime) < int64(racyWindow) {
		delete(c.m, rel)
		return
	}
	now.h = h
	c.m[rel] = now
}
