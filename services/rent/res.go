package rent

import "math"

// res is an amount of compute, counted: what a node has, what a job needs,
// what is free. CPU is in thousandths of a core so that holding and
// releasing fractions never drifts. GPUs are a count here; which devices a
// node has, and which are free, is a type of its own (devices, devices.go)
// that the node's free GPUs are counted from.
type res struct {
	milliCPU int64
	memory   int64
	gpu      int64
	disk     int64
}

func resOf(cpu float64, memory int64, gpu int, disk int64) res {
	return res{milliCPU: int64(math.Round(cpu * 1000)), memory: memory, gpu: int64(gpu), disk: disk}
}

// fits reports whether a is within b in every dimension.
func (a res) fits(b res) bool {
	return a.milliCPU <= b.milliCPU && a.memory <= b.memory && a.gpu <= b.gpu && a.disk <= b.disk
}

func (a res) minus(b res) res {
	return res{a.milliCPU - b.milliCPU, a.memory - b.memory, a.gpu - b.gpu, a.disk - b.disk}
}

func (a res) plus(b res) res {
	return res{a.milliCPU + b.milliCPU, a.memory + b.memory, a.gpu + b.gpu, a.disk + b.disk}
}
