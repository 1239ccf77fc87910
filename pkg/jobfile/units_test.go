package jobfile

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1024", 1024},
		{"1024B", 1024},
		{"1024 b", 1024},
		{"  512MiB  ", 512 * MiB},
		{"512 MiB", 512 * MiB},
		{"512mib", 512 * MiB},
		{"512MIB", 512 * MiB},
		{"512Mi", 512 * MiB},
		{"1.5GiB", 1610612736},
		{"1.5gi", 1610612736},
		{"2GB", 2_000_000_000},
		{"2gb", 2_000_000_000},
		{"10kB", 10_000},
		{"10KB", 10_000},
		{"10KiB", 10 * KiB},
		{"0.1GB", 100_000_000}, // exact, not a float's idea of 0.1
		{"3TB", 3e12},
		{"1TiB", TiB},
		{"1PB", 1e15},
		{"1PiB", PiB},
		{"1.5", 2},          // rounded up to a whole byte
		{"1.1KiB", 1127},    // 1126.4 rounded up
		{"0.0000001kB", 1},  // never rounded down to nothing
		{"007MiB", 7 * MiB}, // leading zeros are decimal, not octal
		{"9223372036854775807", math.MaxInt64},
		{"8191PiB", 8191 * PiB},
	}
	for _, c := range good {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", `jobfile: "" is not a size (expected e.g. 512MiB or 2GB)`},
		{"   ", `jobfile: "   " is not a size (expected e.g. 512MiB or 2GB)`},
		{"lots", `jobfile: "lots" is not a size (expected e.g. 512MiB or 2GB)`},
		{"-1", `jobfile: "-1" is not a size (must not be negative)`},
		{"-1GiB", `jobfile: "-1GiB" is not a size (must not be negative)`},
		{"+1", `jobfile: "+1" is not a size (expected e.g. 512MiB or 2GB)`},
		{"1e9", `jobfile: "1e9" is not a size (expected e.g. 512MiB or 2GB)`},
		{"1_000", `jobfile: "1_000" is not a size (expected e.g. 512MiB or 2GB)`},
		{"0x10", `jobfile: "0x10" is not a size (expected e.g. 512MiB or 2GB)`},
		{".5GiB", `jobfile: ".5GiB" is not a size (expected e.g. 512MiB or 2GB)`},
		{"1.GiB", `jobfile: "1.GiB" is not a size (expected e.g. 512MiB or 2GB)`},
		{"1.2.3", `jobfile: "1.2.3" is not a size (expected e.g. 512MiB or 2GB)`},
		{"GiB", `jobfile: "GiB" is not a size (expected e.g. 512MiB or 2GB)`},
		{"5 apples", `jobfile: "5 apples" is not a size (expected e.g. 512MiB or 2GB)`},
		{"1EiB", `jobfile: "1EiB" is not a size (expected e.g. 512MiB or 2GB)`},
		{"10k", `jobfile: "10k" is not a size ("k" is ambiguous: write 10KB or 10KiB)`},
		{"512M", `jobfile: "512M" is not a size ("M" is ambiguous: write 512MB or 512MiB)`},
		{"1.5g", `jobfile: "1.5g" is not a size ("g" is ambiguous: write 1.5GB or 1.5GiB)`},
		{"9223372036854775808", `jobfile: "9223372036854775808" is not a size (too large)`},
		{"8192PiB", `jobfile: "8192PiB" is not a size (too large)`},
		{"99999999999999999999999999PB", `jobfile: "99999999999999999999999999PB" is not a size (too large)`},
		// Long input is refused unread and quoted short.
		{strings.Repeat("9", 200) + "B", `jobfile: "` + strings.Repeat("9", 100) + `"… is not a size (expected e.g. 512MiB or 2GB)`},
	}
	for _, c := range bad {
		got, err := ParseSize(c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("ParseSize(%q) = %d, %v;\nwant error %s", c.in, got, err, c.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"90", 90 * time.Second},
		{"1.5", 1500 * time.Millisecond},
		{"600", 10 * time.Minute},
		{"90s", 90 * time.Second},
		{"10m", 10 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{" 10m ", 10 * time.Minute},
		{"2d", 48 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"30d", 30 * Day},
		{"0d", 0},
		{"106751d", 106751 * Day},
		{"106751d23h", 106751*Day + 23*time.Hour},
		{"2562047h", 2562047 * time.Hour},
	}
	for _, c := range good {
		got, err := ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	const hint = "(expected e.g. 10m, 1h30m, 2d or 90 for seconds)"
	bad := []struct{ in, want string }{
		{"", `jobfile: "" is not a duration ` + hint},
		{"soon", `jobfile: "soon" is not a duration ` + hint},
		{"-10m", `jobfile: "-10m" is not a duration (must not be negative)`},
		{"-1", `jobfile: "-1" is not a duration (must not be negative)`},
		{"+10m", `jobfile: "+10m" is not a duration ` + hint},
		{"10M", `jobfile: "10M" is not a duration ` + hint},
		{"10 m", `jobfile: "10 m" is not a duration ` + hint},
		{"1.5d", `jobfile: "1.5d" is not a duration ` + hint},
		{"1d-1h", `jobfile: "1d-1h" is not a duration ` + hint},
		{"d", `jobfile: "d" is not a duration ` + hint},
		{"1w", `jobfile: "1w" is not a duration ` + hint},
		{"1e3", `jobfile: "1e3" is not a duration ` + hint},
		{".s", `jobfile: ".s" is not a duration ` + hint},
		{"106752d", `jobfile: "106752d" is not a duration (too long)`},
		{"106751d24h", `jobfile: "106751d24h" is not a duration (too long)`},
		{"99999999999999999999d", `jobfile: "99999999999999999999d" is not a duration (too long)`},
		{"2562048h", `jobfile: "2562048h" is not a duration (too long)`},
		{"9999999999999", `jobfile: "9999999999999" is not a duration (too long)`},
	}
	for _, c := range bad {
		got, err := ParseDuration(c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v;\nwant error %s", c.in, got, err, c.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "0B", 1: "1B", 1000: "1000B", KiB: "1KiB", 1536: "1536B", 512 * MiB: "512MiB", 3 * GiB: "3GiB", -5: "-5B", -2 * MiB: "-2MiB"} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", in, got, want)
		}
	}
}
