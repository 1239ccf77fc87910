package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/goccy/go-yaml"

	"github.com/e31net/e31/services/run/executor"
)

// A job's GPUs in a container: the engine is asked for exactly the devices
// the job holds, by UUID. Where the engine reads CDI specs (Docker 25 and
// later with CDI on, the default since 28.2: Info.CDISpecDirs lists where)
// and a spec there names each held device, the request is for those CDI
// devices (nvidia.com/gpu=<name>), which the engine injects itself: device
// nodes, the driver's libraries, the hooks. Otherwise it goes through the
// engine's "nvidia" device driver with the UUIDs as DeviceIDs (what
// `docker run --gpus device=GPU-…` does), which needs the NVIDIA
// container toolkit. Either way NVIDIA_VISIBLE_DEVICES is set to the held
// UUIDs (a CUDA image sets it to "all", which a runtime in legacy mode
// would honour), and to "void" for a job holding none.

// cdiKind is the kind of the NVIDIA GPUs' CDI devices.
const cdiKind = "nvidia.com/gpu"

// cdiSpec is the part of a CDI spec (cdiVersion 0.3 and later) that names
// devices: its kind, and each device's name and the device nodes it
// gives.
type cdiSpec struct {
	Kind    string `yaml:"kind"`
	Devices []struct {
		Name           string `yaml:"name"`
		ContainerEdits struct {
			DeviceNodes []struct {
				Path     string `yaml:"path"`
				HostPath string `yaml:"hostPath"`
			} `yaml:"deviceNodes"`
		} `yaml:"containerEdits"`
	} `yaml:"devices"`
}

// cdiNames reads the CDI specs in dirs and returns the qualified name of
// each NVIDIA GPU device they give, by UUID where a device is named by
// it, else by its minor (the device node /dev/nvidia<minor> it gives),
// "minor:<n>". Specs that cannot be read are skipped: the engine reports
// its own errors about them.
func cdiNames(dirs []string) map[string]string {
	out := map[string]string{}
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, ent := range ents {
			ext := filepath.Ext(ent.Name())
			if ent.IsDir() || (ext != ".yaml" && ext != ".json") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
			if err != nil {
				continue
			}
			var s cdiSpec
			if err := yaml.Unmarshal(b, &s); err != nil || s.Kind != cdiKind {
				continue
			}
			for _, d := range s.Devices {
				name := cdiKind + "=" + d.Name
				if strings.HasPrefix(d.Name, "GPU-") || strings.HasPrefix(d.Name, "MIG-") {
					out[d.Name] = name
					continue
				}
				for _, n := range d.ContainerEdits.DeviceNodes {
					p := cmpOr(n.HostPath, n.Path)
					if m, ok := strings.CutPrefix(p, "/dev/nvidia"); ok {
						if _, err := strconv.Atoi(m); err == nil {
							key := "minor:" + m
							if _, taken := out[key]; !taken {
								out[key] = name
							}
						}
					}
				}
			}
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// errNoCDIName says a held device has no CDI name where the engine reads
// CDI: the request falls back to the nvidia driver.
var errNoCDIName = errors.New("container: no CDI device names the GPU")

// deviceRequests is what the engine is asked for a job holding g: nothing
// for none; the CDI devices of the held GPUs where names (cdiNames of the
// engine's spec directories; nil where it reads no CDI) has each; else the
// nvidia driver's, by UUID.
func deviceRequests(g executor.GPUs, names map[string]string) []container.DeviceRequest {
	if len(g.Held) == 0 {
		return nil
	}
	if ids, err := cdiIDs(g, names); err == nil {
		return []container.DeviceRequest{{Driver: "cdi", DeviceIDs: ids}}
	}
	return []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: g.UUIDs(), Capabilities: [][]string{{"gpu"}}}}
}

func cdiIDs(g executor.GPUs, names map[string]string) ([]string, error) {
	if names == nil {
		return nil, errNoCDIName
	}
	ids := make([]string, 0, len(g.Held))
	for _, d := range g.Held {
		n, ok := names[d.UUID]
		if !ok {
			n, ok = names["minor:"+strconv.Itoa(d.Minor)]
		}
		if !ok {
			return nil, fmt.Errorf("%w %s", errNoCDIName, d.UUID)
		}
		ids = append(ids, n)
	}
	return ids, nil
}

// visibleDevices is NVIDIA_VISIBLE_DEVICES for a job holding g.
func visibleDevices(g executor.GPUs) string {
	if len(g.Held) == 0 {
		return "void"
	}
	return strings.Join(g.UUIDs(), ",")
}

// withEnv is env with k set to v, in place of any value it had.
func withEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, k+"=") {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}
