//go:build nvml && cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// OpenProbe opens NVML (libnvidia-ml.so.1, loaded at run time): a node
// built with -tags nvml and cgo, on a host with the driver. Without the
// library it returns ErrNoNVML, and the node goes on without it.
func OpenProbe() (Probe, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: %v", ErrNoNVML, ret)
	}
	return nvmlProbe{}, nil
}

type nvmlProbe struct{}

func (nvmlProbe) device(uuid string) (nvml.Device, error) {
	d, ret := nvml.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: NVML handle of %s: %v", uuid, ret)
	}
	return d, nil
}

func (p nvmlProbe) ComputeProcesses(uuid string) ([]int, error) {
	d, err := p.device(uuid)
	if err != nil {
		return nil, err
	}
	ps, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: NVML compute processes of %s: %v", uuid, ret)
	}
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = int(p.Pid)
	}
	return out, nil
}

func (p nvmlProbe) Sample(uuid string) (float64, int64, error) {
	d, err := p.device(uuid)
	if err != nil {
		return 0, 0, err
	}
	u, ret := d.GetUtilizationRates()
	if ret != nvml.SUCCESS {
		return 0, 0, fmt.Errorf("gpu: NVML utilisation of %s: %v", uuid, ret)
	}
	m, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, fmt.Errorf("gpu: NVML memory of %s: %v", uuid, ret)
	}
	return float64(u.Gpu), int64(m.Used), nil
}

func (p nvmlProbe) MemoryBytes(uuid string) (int64, error) {
	d, err := p.device(uuid)
	if err != nil {
		return 0, err
	}
	m, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu: NVML memory of %s: %v", uuid, ret)
	}
	return int64(m.Total), nil
}

func (nvmlProbe) Close() error {
	if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: NVML shutdown: %v", ret)
	}
	return nil
}
