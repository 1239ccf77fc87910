// Command probe is the program in the container executor's test image: a
// static binary that does what a test job asks and reports what it saw as
// key=value lines.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	switch os.Args[1] {
	case "honest":
		b, err := os.ReadFile("/data/in.txt")
		fmt.Printf("in=%s err=%v\n", b, err)
		fmt.Printf("env=%s %s %s\n", os.Getenv("E31_JOB_ID"), os.Getenv("E31_DATA"), os.Getenv("E31_OUTPUT"))
		fmt.Printf("uid=%d\n", os.Getuid())
		h, _ := os.Hostname()
		fmt.Printf("host=%s\n", h)
		fmt.Printf("out=%v\n", os.WriteFile("/out/result.txt", []byte("done"), 0o644))
		fmt.Printf("tmp=%v\n", os.WriteFile("/tmp/scratch", []byte("x"), 0o644))
		for _, p := range []string{"/x", "/data/x", "/probe"} {
			if err := os.WriteFile(p, []byte("x"), 0o644); err == nil {
				fmt.Printf("wrote=%s\n", p)
			}
		}
		ifs, _ := net.Interfaces()
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		fmt.Printf("ifaces=%s\n", strings.Join(names, " "))
		for _, a := range os.Args[2:] {
			if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
				c.Close()
				fmt.Printf("connected=%s\n", a)
			}
		}
		b, _ = os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "CapEff") || strings.HasPrefix(l, "NoNewPrivs") {
				fmt.Println(strings.ReplaceAll(strings.ReplaceAll(l, "\t", ""), ":", "="))
			}
		}
		fmt.Println("done=1")
	case "exit":
		os.Exit(3)
	case "alloc":
		var keep [][]byte
		for {
			b := make([]byte, 8<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	case "spin":
		d, _ := time.ParseDuration(os.Args[2])
		end := time.Now().Add(d)
		runtime.GOMAXPROCS(2)
		done := make(chan bool)
		for range 2 {
			go func() {
				for time.Now().Before(end) {
				}
				done <- true
			}()
		}
		<-done
		<-done
	case "fill":
		f, err := os.Create("/out/big")
		if err != nil {
			fmt.Printf("err=%v\n", err)
			return
		}
		buf := make([]byte, 1<<20)
		var n int64
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if err != nil {
				fmt.Printf("err=%v\n", err)
				break
			}
		}
		f.Close()
		os.Remove("/out/big")
		fmt.Printf("size=%d\n", n)
	case "write":
		// write MIB: "begun" into /out/begun, then MIB MiB into /out/big;
		// exit 3 if a write fails, keeping what was written.
		mib, _ := strconv.Atoi(os.Args[2])
		os.WriteFile("/out/begun", []byte("begun\n"), 0o644)
		f, err := os.Create("/out/big")
		if err != nil {
			fmt.Printf("err=%v\n", err)
			os.Exit(3)
		}
		buf := make([]byte, 1<<20)
		for i := 0; i < mib; i++ {
			if _, err := f.Write(buf); err != nil {
				fmt.Printf("err=%v\n", err)
				os.Exit(3)
			}
		}
		if err := f.Close(); err != nil {
			fmt.Printf("err=%v\n", err)
			os.Exit(3)
		}
		fmt.Printf("size=%d\n", mib<<20)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		os.WriteFile("/out/ready", []byte("up"), 0o644)
		for {
			time.Sleep(time.Hour)
		}
	}
}
