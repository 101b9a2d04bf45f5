package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sizeJSON runs size with args and --json and returns what it computed.
func sizeJSON(t *testing.T, args ...string) sizing {
	t.Helper()
	var s sizing
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"size", "--json"}, args...)...)), &s))
	return s
}

// requireLittlesLaw checks s against Little's law, L = λ·W, recomputed from its inputs, and
// the members and partitions against the slots they must carry.
func requireLittlesLaw(t *testing.T, s sizing) {
	t.Helper()
	require.Equal(t, int(math.Ceil(s.Rate*s.TurnTimeAt-1e-9)), s.InFlight, "L = λ·W at the percentile")
	require.Equal(t, int(math.Ceil(s.Rate*s.TurnTimeMean-1e-9)), s.InFlightMean, "L = λ·W at the mean")
	require.Equal(t, int(math.Ceil(s.GrowthRate*s.TurnTimeAt-1e-9)), s.GrowthInFlight)
	require.InDelta(t, s.Rate*s.Growth, s.GrowthRate, 1e-9)
	require.Equal(t, max(s.InFlight, s.InFlightBurst), s.Slots)
	require.Equal(t, max(s.GrowthInFlight, s.GrowthBurst), s.GrowthSlots)
	require.GreaterOrEqual(t, s.InFlightBurst, s.InFlightMean, "bursts above the mean")
	require.GreaterOrEqual(t, s.Members*s.MaxInFlight, s.Slots, "the members carry the slots")
	require.Less(t, (s.Members-1)*s.MaxInFlight, s.Slots, "and no member more")
	require.GreaterOrEqual(t, s.GrowthMembers*s.MaxInFlight, s.GrowthSlots)
	require.GreaterOrEqual(t, s.Partitions, s.GrowthMembers, "a partition per member at growth")
	require.GreaterOrEqual(t, s.Partitions*s.PerPartition, s.GrowthSlots, "the partitions carry the grown slots")
}

// turnstile size for 20 s turns at 30/s: 600 turns in flight by Little's law, members and
// partitions to carry them with growth, the warning that partitions cannot be reduced, and
// the plot, as PNG and as SVG.
func TestSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	png := filepath.Join(dir, "size.png")
	out := ok(t, "size", "--turn-p50=20s", "--rate=30", "--plot="+png)
	m := regexp.MustCompile(`turns in flight \(λ·W, W = p99\)\s+(\d+)\s+(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	inFlight, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, inFlight, 600, out)
	require.Equal(t, 600, inFlight, "20 s × 30/s")
	require.Equal(t, "1200", m[2], "with growth x2")
	require.Contains(t, out, "cannot be reduced")
	require.Contains(t, out, "moves keys")
	require.Contains(t, out, "Plot: "+png)
	b, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")), "a PNG")

	svg := filepath.Join(dir, "size.svg")
	s := sizeJSON(t, "--turn-p50=20s", "--rate=30", "--plot="+svg)
	require.Equal(t, 600, s.InFlight)
	require.InDelta(t, 20, s.TurnTimeAt, 1e-9)
	requireLittlesLaw(t, s)
	b, err = os.ReadFile(svg)
	require.NoError(t, err)
	require.Contains(t, string(b), "<svg")
	require.Contains(t, string(b), "Little")

	// A constant turn time with random arrivals: 600 on average, more 1% of the time (the
	// Poisson 99th percentile of 600 is about 600 + 2.33·√600 = 657).
	require.InDelta(t, 600+2.326*math.Sqrt(600), s.InFlightBurst, 3)
	require.Equal(t, s.InFlightBurst, s.Slots)
	require.Equal(t, int(math.Ceil(float64(s.Slots)/64)), s.Members)
}

// Every way of giving the turn time is checked against Little's law.
func TestSizeLittlesLaw(t *testing.T) {
	t.Parallel()
	// A log-normal through p50 and p99: W at p99 is the given p99, its mean is above p50.
	s := sizeJSON(t, "--turn-p50=8s", "--turn-p99=45s", "--rate=30", "--plot=none")
	require.InDelta(t, 45, s.TurnTimeAt, 1e-6)
	require.InDelta(t, 8, s.TurnTimeP50, 1e-6)
	require.Greater(t, s.TurnTimeMean, 8.0)
	require.Equal(t, 1350, s.InFlight)
	requireLittlesLaw(t, s)
	// Another percentile lies between.
	p90 := sizeJSON(t, "--turn-p50=8s", "--turn-p99=45s", "--rate=30", "--percentile=90", "--plot=none")
	require.Greater(t, p90.TurnTimeAt, 8.0)
	require.Less(t, p90.TurnTimeAt, 45.0)
	requireLittlesLaw(t, p90)

	// Measured samples, 1 s to 100 s: the empirical 99th percentile is 99 s.
	var samples strings.Builder
	samples.WriteString("# turn times\n\n")
	for i := 1; i <= 100; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&samples, "%ds\n", i)
		} else {
			fmt.Fprintf(&samples, "%d\n", i)
		}
	}
	file := filepath.Join(t.TempDir(), "samples.txt")
	require.NoError(t, os.WriteFile(file, []byte(samples.String()), 0o600))
	s = sizeJSON(t, "--samples="+file, "--rate=2.5", "--max-in-flight=16", "--growth=3", "--plot=none")
	require.InDelta(t, 99, s.TurnTimeAt, 1e-9)
	require.InDelta(t, 50.5, s.TurnTimeMean, 1e-9)
	require.Equal(t, 248, s.InFlight, "2.5/s × 99 s = 247.5")
	requireLittlesLaw(t, s)

	// One turn at a time per partition: a partition per turn in flight.
	s = sizeJSON(t, "--turn-p99=20s", "--rate=30", "--ordering-by-partition", "--plot=none")
	require.Equal(t, 1, s.PerPartition)
	require.Equal(t, s.GrowthSlots, s.Partitions)
	requireLittlesLaw(t, s)
	s = sizeJSON(t, "--turn-p99=20s", "--rate=30", "--max-in-flight-per-partition=8", "--plot=none")
	require.Equal(t, int(math.Ceil(float64(s.GrowthSlots)/8)), s.Partitions)
	requireLittlesLaw(t, s)
}

// Bad input to size is a usage error of one line, before any file is written.
func TestSizeUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	require.NoError(t, os.WriteFile(empty, []byte("# nothing\n"), 0o600))
	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("12s\nsoon\n"), 0o600))
	for args, want := range map[string]string{
		"--turn-p50=20s":                                    "--rate is required",
		"--turn-p50=20s --rate=-1":                          "--rate is required",
		"--rate=30":                                         "give the turn time",
		"--rate=30 --turn-p50=20s --turn-p99=10s":           "below --turn-p50",
		"--rate=30 --turn-p50=20s --samples=" + empty:       "not both",
		"--rate=30 --samples=" + empty:                      "holds no turn time",
		"--rate=30 --samples=" + bad:                        "line 2",
		"--rate=30 --turn-p50=20s --percentile=100":         "--percentile",
		"--rate=30 --turn-p50=20s --growth=0.5":             "cannot be reduced",
		"--rate=30 --turn-p50=20s --max-in-flight=0":        "--max-in-flight must be positive",
		"--rate=30 --turn-p50=20s --plot=" + dir + "/x.pdf": "want a .png or .svg",
	} {
		code, out, errOut := cli(t, append([]string{"size"}, strings.Fields(args)...)...)
		require.Equal(t, exitUsage, code, "%s: %s", args, errOut)
		require.Contains(t, errOut, want, args)
		require.Empty(t, out, args)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no plot written")
}

// size writes a file only when --plot names one: it wrote turnstile-size.png into the working
// directory on every run. (Not parallel: it changes the working directory.)
func TestSizeWritesNoFileUnlessAsked(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	out := ok(t, "size", "--turn-p50=20s", "--rate=30")
	require.NotContains(t, out, "Plot:")
	s := sizeJSON(t, "--turn-p50=20s", "--rate=30")
	require.Empty(t, s.Plot)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no file written without --plot")
	_, help, _ := cli(t, "size", "--help")
	require.Contains(t, help, "only when --plot names a file")
}
