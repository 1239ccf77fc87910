package jobfile_test

import (
	"fmt"

	"github.com/e31net/e31/pkg/jobfile"
)

func ExampleParse() {
	src := []byte(`work:
  command: python3 train.py --epochs 3
request:
  memory: 2G
output:
  - model.bin
  - {path: "logs/*.txt", required: false}
`)
	if _, err := jobfile.Parse("job.yaml", src, "/home/u/jobs"); err != nil {
		fmt.Println(err)
	}

	src = []byte(`{"work": {"command": ["python3", "train.py"]}, "request": {"memory": "2GiB", "limit": "1h"}}`)
	job, err := jobfile.Parse("job.json", src, "/home/u/jobs")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q %+v\n", job.Spec.Work.Command, job.Spec.Request)
	// Output:
	// job.yaml:4:3: request.limit: required (a duration such as 10m)
	// job.yaml:4:11: request.memory: "2G" is not a size ("G" is ambiguous: write 2GB or 2GiB)
	// ["python3" "train.py"] {CPU:1 MemoryBytes:2147483648 GPU:0 DiskBytes:1073741824 LimitSeconds:3600}
}

func ExampleParseSize() {
	for _, s := range []string{"512MiB", "2GB", "1.5GiB", "1024", "10k"} {
		n, err := jobfile.ParseSize(s)
		fmt.Println(n, err)
	}
	// Output:
	// 536870912 <nil>
	// 2000000000 <nil>
	// 1610612736 <nil>
	// 1024 <nil>
	// 0 jobfile: "10k" is not a size ("k" is ambiguous: write 10KB or 10KiB)
}

func ExampleParseDuration() {
	for _, s := range []string{"10m", "1h30m", "2d", "90", "-5s"} {
		d, err := jobfile.ParseDuration(s)
		fmt.Println(d, err)
	}
	// Output:
	// 10m0s <nil>
	// 1h30m0s <nil>
	// 48h0m0s <nil>
	// 1m30s <nil>
	// 0s jobfile: "-5s" is not a duration (must not be negative)
}
