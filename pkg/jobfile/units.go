package jobfile

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Byte multiples, for sizes in code and tests.
const (
	KiB int64 = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
	PiB
)

// sizeUnits maps a lower-cased unit to its multiplier. Both families are
// here because people write both; the 'i' tells them apart, so matching is
// case-insensitive without ambiguity.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB, "pib": PiB,
	// Kubernetes writes the IEC units without the B.
	"ki": KiB, "mi": MiB, "gi": GiB, "ti": TiB, "pi": PiB,
}

// ambiguousUnits are refused rather than guessed: Docker reads "512m" as
// 512 MiB, Kubernetes reads "512M" as 512 MB and "512m" as 0.512 bytes. A
// wrong guess would be a silent factor of 1.05 (or 10^9) in a request.
var ambiguousUnits = map[string]bool{"k": true, "m": true, "g": true, "t": true, "p": true}

// sizePattern is a decimal number, optionally with a fraction, then a unit.
// Signs, exponents and digit separators are not sizes.
var sizePattern = regexp.MustCompile(`^([0-9]+)(\.[0-9]+)?[ \t]*([A-Za-z]*)$`)

// maxUnitText bounds what ParseSize and ParseDuration look at, so that a
// megabyte of digits costs nothing.
const maxUnitText = 64

const sizeHint = "expected e.g. 512MiB or 2GB"

// ParseSize reads a size in bytes: a decimal number followed by an optional
// unit.
//
//   - No unit, or B: bytes ("1024").
//   - SI units are powers of 1000: kB, MB, GB, TB, PB.
//   - IEC units are powers of 1024: KiB, MiB, GiB, TiB, PiB, also written
//     without the B (Ki, Mi, Gi, Ti, Pi) as Kubernetes does.
//   - Units are case-insensitive ("512mib", "2gb"); the 'i' alone tells the
//     families apart. Single letters (k, M, G, T, P) are refused because tools
//     disagree on what they mean; the error says which to write instead.
//   - A fraction is allowed ("1.5GiB") and the result is rounded up to a
//     whole byte.
//   - Space between number and unit is allowed; signs, exponents, '_' and
//     anything else are not. Negative sizes and sizes above math.MaxInt64
//     are errors.
func ParseSize(s string) (int64, error) {
	n, why := parseSize(s)
	if why != "" {
		return 0, fmt.Errorf("jobfile: %s", why)
	}
	return n, nil
}

// parseSize returns the size, or why s is not one, worded for a person.
func parseSize(s string) (int64, string) {
	t := strings.TrimSpace(s)
	notSize := func(why string) (int64, string) {
		return 0, fmt.Sprintf("%s is not a size (%s)", quote(s), why)
	}
	if len(t) > maxUnitText {
		return notSize(sizeHint)
	}
	if strings.HasPrefix(t, "-") {
		return notSize("must not be negative")
	}
	m := sizePattern.FindStringSubmatch(t)
	if m == nil {
		return notSize(sizeHint)
	}
	unit := strings.ToLower(m[3])
	mult, ok := sizeUnits[unit]
	if !ok {
		if ambiguousUnits[unit] {
			num, u := m[1]+m[2], strings.ToUpper(unit)
			return notSize(fmt.Sprintf("%q is ambiguous: write %s%sB or %s%siB", m[3], num, u, num, u))
		}
		return notSize(sizeHint)
	}
	// Exact rational arithmetic: "0.1GB" is 100000000 bytes, not a float's
	// idea of it. The pattern above bounds the digits, so this is cheap.
	r, ok := new(big.Rat).SetString(m[1] + m[2])
	if !ok {
		return notSize(sizeHint)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return notSize("too large")
	}
	return q.Int64(), ""
}

// FormatSize writes n as ParseSize reads it, in the largest IEC unit that
// divides it exactly ("4GiB"): flags show their defaults the way people
// write them.
func FormatSize(n int64) string { return formatSize(n) }

// formatSize writes n in the largest IEC unit that divides it exactly, so that
// messages echo sizes the way people write them.
func formatSize(n int64) string {
	units := []struct {
		name string
		size int64
	}{{"PiB", PiB}, {"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}
	for _, u := range units {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

var (
	secondsPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	daysPattern    = regexp.MustCompile(`^([0-9]+)d(.*)$`)
	// goPattern is the syntax time.ParseDuration accepts (without a sign),
	// so that its one error can be told apart: well formed means too long.
	goPattern = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)
)

const durationHint = "expected e.g. 10m, 1h30m, 2d or 90 for seconds"

// Day is 24 hours. Job limits are wall-clock budgets, not calendar dates, so
// a day never has 23 or 25 hours here.
const Day = 24 * time.Hour

// ParseDuration reads a duration:
//
//   - a Go duration: "90s", "10m", "1h30m", "1.5h", "250ms" (units ns, us,
//     µs, ms, s, m, h; lower case, as time.ParseDuration wants);
//   - optionally led by a whole number of days: "2d", "1d12h";
//   - or a plain number, which is seconds: "600", "1.5".
//
// Zero is a duration; negative ones, signs and durations beyond what
// time.Duration holds (about 292 years) are errors.
func ParseDuration(s string) (time.Duration, error) {
	d, why := parseDuration(s)
	if why != "" {
		return 0, fmt.Errorf("jobfile: %s", why)
	}
	return d, nil
}

// parseDuration returns the duration, or why s is not one.
func parseDuration(s string) (time.Duration, string) {
	t := strings.TrimSpace(s)
	notDuration := func(why string) (time.Duration, string) {
		return 0, fmt.Sprintf("%s is not a duration (%s)", quote(s), why)
	}
	if len(t) > maxUnitText || t == "" {
		return notDuration(durationHint)
	}
	switch t[0] {
	case '-':
		return notDuration("must not be negative")
	case '+':
		return notDuration(durationHint)
	}
	if secondsPattern.MatchString(t) {
		t += "s"
	}
	var days time.Duration
	if m := daysPattern.FindStringSubmatch(t); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > int64(math.MaxInt64/Day) {
			return notDuration("too long")
		}
		days, t = time.Duration(n)*Day, m[2]
		if t == "" {
			return days, ""
		}
		if t[0] == '-' || t[0] == '+' {
			return notDuration(durationHint)
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		// time.ParseDuration has one error for garbage and overflow alike;
		// telling them apart helps the person reading.
		if goPattern.MatchString(t) {
			return notDuration("too long")
		}
		return notDuration(durationHint)
	}
	if d > math.MaxInt64-days {
		return notDuration("too long")
	}
	return days + d, ""
}

// formatDuration writes d for a message, with days when it has whole ones.
func formatDuration(d time.Duration) string {
	if d >= Day && d%Day == 0 {
		return strconv.FormatInt(int64(d/Day), 10) + "d"
	}
	return d.String()
}

// seconds reads v as a duration (want says what is expected) that check,
// given its seconds, finds nothing wrong with; a fault is reported at v.
func (r *reader) seconds(v value, want string, check func(float64) string) (float64, bool) {
	s, ok := r.text(v, want)
	if !ok {
		return 0, false
	}
	d, why := parseDuration(s)
	if why == "" {
		why = check(d.Seconds())
	}
	if why != "" {
		r.fail(v, why)
		return 0, false
	}
	return d.Seconds(), true
}
