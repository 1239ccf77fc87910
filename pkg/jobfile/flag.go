package jobfile

import "flag"

// SizeValue is a size in bytes as a command-line flag (a flag.Value),
// written as a job file writes sizes ("4GiB", "512MiB"): a node's sizes and
// a benchmark's read as a job's do, and the help shows the default as
// people write it.
type SizeValue int64

// SizeVar defines on fs a flag of a size in bytes, stored in p and set to
// def.
func SizeVar(fs *flag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	fs.Var((*SizeValue)(p), name, usage)
}

// String implements flag.Value.
func (v *SizeValue) String() string {
	if v == nil {
		return ""
	}
	return FormatSize(int64(*v))
}

// Set implements flag.Value.
func (v *SizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v = SizeValue(n)
	return nil
}

// Type is what a help shows the flag takes (spf13/pflag asks for it).
func (*SizeValue) Type() string { return "size" }
