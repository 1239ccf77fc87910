package audit

import "sort"

// seqs follows the stream sequences read, to tell a message read twice
// from one that comes late, and to list at the end those never read. It
// holds the gaps, not the sequences: a log read in order has none, so it
// costs nothing however long the log, where a bit per sequence would grow
// with it.
type seqs struct {
	last uint64 // the highest read
	zero bool   // #0 was read (a copy of the log may hold one)
	// gaps are the sequences from 1 to last not read, as [first, last]
	// ranges, in order and apart.
	gaps [][2]uint64
}

// add notes that seq was read, and reports whether it was read before, or
// else whether it comes after a higher one.
func (s *seqs) add(seq uint64) (dup, late bool) {
	switch {
	case seq == 0:
		dup, s.zero = s.zero, true
		return dup, !dup && s.last > 0
	case seq > s.last:
		if seq > s.last+1 {
			s.gaps = append(s.gaps, [2]uint64{s.last + 1, seq - 1})
		}
		s.last = seq
		return false, false
	}
	// The first gap that ends at or after seq.
	i := sort.Search(len(s.gaps), func(i int) bool { return s.gaps[i][1] >= seq })
	if i == len(s.gaps) || s.gaps[i][0] > seq {
		return true, false
	}
	switch g := s.gaps[i]; {
	case g[0] == g[1]:
		s.gaps = append(s.gaps[:i], s.gaps[i+1:]...)
	case seq == g[0]:
		s.gaps[i][0]++
	case seq == g[1]:
		s.gaps[i][1]--
	default:
		s.gaps = append(s.gaps[:i+1], s.gaps[i:]...)
		s.gaps[i][1], s.gaps[i+1][0] = seq-1, seq+1
	}
	return false, true
}
