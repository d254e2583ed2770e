package app

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Alive reports whether process pid exists and is not a zombie (a killed
// process whose parent has not reaped it yet is not alive). Linux only:
// it reads /proc.
func Alive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// GroupMembers lists the live (not zombie) processes of process group
// pgid, from /proc: what is left of a replica after Stop (nothing).
func GroupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, state, ok := procStat(pid); ok && g == pgid && state != "Z" && state != "X" {
			live = append(live, pid)
		}
	}
	return live
}

// procStat reads the process group and state of pid from /proc/pid/stat.
func procStat(pid int) (pgid int, state string, ok bool) {
	f := procStatFields(pid) // state ppid pgrp …
	if len(f) < 3 {
		return 0, "", false
	}
	g, err := strconv.Atoi(f[2])
	return g, f[0], err == nil
}

// procStatFields returns the fields of /proc/pid/stat after the command name
// (state, ppid, …), or nil when pid is gone.
func procStatFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// procStartTime returns pid's start time (clock ticks since boot), which
// tells a process from a later one with the same PID.
func procStartTime(pid int) (string, error) {
	f := procStatFields(pid)
	if len(f) < 20 {
		return "", fmt.Errorf("app: process %d: gone", pid)
	}
	return f[19], nil
}
