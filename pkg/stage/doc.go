// Package stage moves a job's data between a machine and the store: the
// input a submitter declares, before the job runs, and the output the job
// leaves, after it.
//
// # Content addressed
//
// Everything is stored under a name derived from the sha256 of its content,
// so the same bytes are stored once, a re-submit of the same data sends
// nothing, and anyone holding a digest can check what they got. A file is
// named by the digest of its bytes. A folder is a manifest, a small canonical
// JSON document listing every file (relative slash path, mode, size, digest),
// itself stored as a blob; the folder's digest is the manifest's digest, so
// equal folders have equal digests wherever they were uploaded.
//
// The objects in a [Store] are:
//
//	blob/sha256/<hex>    bytes whose sha256 is <hex>: a file up to PartSize,
//	                     one part of a larger file, or a folder manifest
//	parts/sha256/<hex>   the part list of a file larger than PartSize whose
//	                     sha256 is <hex>: the digests and sizes of its parts,
//	                     in order
//
// A manifest is compact JSON with its entries sorted by path, so that the
// same folder always encodes to the same bytes (shown indented here):
//
//	{"version":1,
//	 "files":[{"path":"run.sh","mode":"0755","size":18,"digest":"sha256:…"},
//	          {"path":"sub/b.bin","mode":"0644","size":200000,"digest":"sha256:…"}],
//	 "dirs":["empty"]}
//
// Only the execute bit of a mode is kept; "dirs" lists the directories that
// hold nothing, the others being implied by their files.
//
// A large file is split into parts so that an interrupted upload resumes:
// every part is content addressed on its own, and a second run sends only the
// parts the store does not have yet. The part list is written last, so its
// presence says the upload finished. Readers look for a blob first and a part
// list second, so a file reads the same whatever PartSize was when it was
// written.
//
// # Verified
//
// Every byte that comes out of the store is hashed as it streams and checked
// against the digest that named it, before the data is handed to a job or a
// user: a tampered, truncated or substituted object fails with [ErrCorrupt]
// and the error names the file. [Download] and [Fetch] write to temporary
// names and rename only verified files into place, so a failure leaves
// nothing that looks complete. [Verify] is the cheap check SUBMIT makes: it
// reads only metadata (and folder manifests) to see that every object is
// there, with the size and digest the store recorded when it was written.
//
// # Streamed
//
// Memory stays flat whatever the size of the data: files are read and written
// through fixed buffers, never whole. Hashing a local file before upload
// takes one pass over it; the upload takes a second.
//
// # Safe
//
// Paths from manifests and output lists are data from elsewhere: they are
// refused unless they are relative, clean and local, and files are written
// through an [os.Root], so no symlink can lead a write outside the
// destination. [Collect] reads a job's output directory, which the job
// controlled, the same way: symlinks are never followed, only regular files
// are collected, and the total is bounded. Output is declared with path.Match
// patterns over slash paths, plus "**" for any depth (see [Match]).
//
// # Many files
//
// Small files are dominated by round trips to the store, so files move
// [Parallel] at a time, and every content is sent once however many files
// share it.
//
// # Output
//
// A job's output is stored like an uploaded folder: [Collect] stores every
// file, then the manifest of them all (with the execute bit of each), and
// names it in Collected.Manifest. Events are bounded, so they list only the
// first files (events.Listed) and count the rest; the manifest is what says
// what was returned. [FetchDir] brings it back whole, and [OutputRef] hands
// it to a later job (from_job) as it is, without passing through a client.
//
// # Deleting
//
// The store is content addressed, so one object may belong to many jobs: a
// file two jobs staged, a part shared by two large files, a job's output
// that a later job staged. Nothing here decides what may go. An [Expander]
// names the objects a file or folder is stored in (its blob or part list
// and parts, a folder's manifest and every file's), so that the owner of
// the store (OUTPUT) can count, for every object, the live jobs that hold
// it, and [DeleteObjects] removes only what no live job holds.
package stage
