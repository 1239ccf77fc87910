//go:build linux

package sandbox

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

var phaseMu sync.Mutex
var phaseSum = map[string]time.Duration{}
var phaseN = map[string]int{}

func phase(name string, since time.Time) time.Time {
	now := time.Now()
	phaseMu.Lock()
	phaseSum[name] += now.Sub(since)
	phaseN[name]++
	phaseMu.Unlock()
	return now
}

func PhaseReport() string {
	phaseMu.Lock()
	defer phaseMu.Unlock()
	var ks []string
	for k := range phaseSum {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%-22s %8.0fµs  n=%d\n", k, float64(phaseSum[k].Microseconds())/float64(phaseN[k]), phaseN[k])
	}
	phaseSum = map[string]time.Duration{}
	phaseN = map[string]int{}
	return b.String()
}
