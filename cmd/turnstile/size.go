package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/turnstile-go/turnstile/consumer"
)

const sizeUsage = `
Sizes a service from its turn time and a target rate, by Little's law: the turns in flight
are the rate times the turn time (L = λ·W). It takes W at a high percentile of the turn
time (--percentile, 99 by default) for headroom, then derives the members (each runs
--max-in-flight turns at once, consumer.Config.MaxInFlight) and the partitions of the
requests topic, sized for --growth times the rate: a topic's partitions cannot be reduced,
and adding partitions later moves keys (conversations) to other partitions.

The turn time is --turn-p50 and --turn-p99 (a log-normal distribution through both; one
of them alone is a constant turn time), or --samples, a file of measured turn times (one a
line: a Go duration, 12.5s, or seconds, 12.5; "-" reads standard input).

It prints a table (or --json) and, only when --plot names a file, writes there a PNG or SVG
(by its extension) of throughput against turns in flight: Little's law at the sizing percentile and at the mean,
and the curve from the distribution (the highest rate whose turns in flight stay within L
99% of the time: with random arrivals they are Poisson-distributed around λ times the mean
turn time), with the target marked.

Examples:
  turnstile size --turn-p50 20s --rate 30
  turnstile size --turn-p50 8s --turn-p99 45s --rate 30 --growth 3 --plot sizing.svg
  turnstile size --samples turn-times.txt --rate 120 --max-in-flight 32 --json
`

// sizeOccupancy is the probability with which the curve of the plot keeps the turns in
// flight within L.
const sizeOccupancy = 0.99

// turnTimes is a turn-time distribution: a quantile function (q in [0, 1], seconds) and its
// mean in seconds.
type turnTimes struct {
	quantile func(q float64) float64
	mean     float64
	source   string // what it was made from, for the output
}

// logNormalTimes is the log-normal distribution whose median is p50 and whose 99th
// percentile is p99 (seconds, 0 < p50 <= p99); p50 == p99 is a constant turn time.
func logNormalTimes(p50, p99 float64) turnTimes {
	if p50 == p99 {
		return turnTimes{quantile: func(float64) float64 { return p50 }, mean: p50, source: "constant " + seconds(p50)}
	}
	d := distuv.LogNormal{Mu: math.Log(p50), Sigma: (math.Log(p99) - math.Log(p50)) / distuv.UnitNormal.Quantile(0.99)}
	return turnTimes{quantile: d.Quantile, mean: d.Mean(),
		source: fmt.Sprintf("log-normal through p50 %s and p99 %s", seconds(p50), seconds(p99))}
}

// sampleTimes is the empirical distribution of samples (seconds, at least one).
func sampleTimes(samples []float64, from string) turnTimes {
	sorted := slices.Sorted(slices.Values(samples))
	return turnTimes{quantile: func(q float64) float64 { return stat.Quantile(q, stat.Empirical, sorted, nil) },
		mean: stat.Mean(sorted, nil), source: fmt.Sprintf("%d samples from %s", len(sorted), from)}
}

// readSamples reads turn times, one a line (a Go duration or seconds; blank lines and lines
// starting with # are skipped), as seconds.
func readSamples(r io.Reader, name string) ([]float64, error) {
	var out []float64
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			d, derr := time.ParseDuration(line)
			if derr != nil {
				return nil, usagef("--samples %s line %d: %q is neither a duration (12.5s) nor seconds (12.5)", name, n, line)
			}
			v = d.Seconds()
		}
		if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, usagef("--samples %s line %d: a turn time must be positive, not %q", name, n, line)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read --samples %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, usagef("--samples %s holds no turn time", name)
	}
	return out, nil
}

// sizing is what size computes; its JSON is size --json.
type sizing struct {
	Rate              float64 `json:"rate_per_second"`
	Growth            float64 `json:"growth"`
	Percentile        float64 `json:"percentile"`
	TurnTimeSource    string  `json:"turn_time_source"`
	TurnTimeP50       float64 `json:"turn_time_p50_seconds"`
	TurnTimeAt        float64 `json:"turn_time_at_percentile_seconds"`
	TurnTimeMean      float64 `json:"turn_time_mean_seconds"`
	MaxInFlight       int     `json:"max_in_flight_per_member"`
	PerPartition      int     `json:"max_in_flight_per_partition"`
	InFlight          int     `json:"turns_in_flight"`
	InFlightMean      int     `json:"turns_in_flight_mean"`
	InFlightBurst     int     `json:"turns_in_flight_bursts"`
	Slots             int     `json:"slots"`
	Members           int     `json:"members"`
	GrowthRate        float64 `json:"growth_rate_per_second"`
	GrowthInFlight    int     `json:"growth_turns_in_flight"`
	GrowthBurst       int     `json:"growth_turns_in_flight_bursts"`
	GrowthSlots       int     `json:"growth_slots"`
	GrowthMembers     int     `json:"growth_members"`
	Partitions        int     `json:"partitions"`
	PartitionsPerRule string  `json:"partitions_rule"`
	Plot              string  `json:"plot,omitempty"`
}

// ceilInt rounds x up to an int, taking off a rounding error of the float product first
// (600.0000000001 turns in flight are 600).
func ceilInt(x float64) int { return int(math.Ceil(x - 1e-9)) }

// size applies Little's law: turns in flight L = λ·W with W the turn time at the percentile.
// The slots to provide are the larger of L and the turns in flight that random arrivals
// (Poisson, around λ times the mean turn time) stay within sizeOccupancy of the time, which
// is the larger at small rates and near-constant turn times. Members run the slots at
// maxInFlight each; partitions are sized for the grown rate: at least one per member, and
// enough that perPartition turns at once in each carry the grown slots.
func size(t turnTimes, rate, growth, percentile float64, maxInFlight, perPartition int) sizing {
	s := sizing{Rate: rate, Growth: growth, Percentile: percentile, TurnTimeSource: t.source,
		TurnTimeP50: t.quantile(0.5), TurnTimeAt: t.quantile(percentile / 100), TurnTimeMean: t.mean,
		MaxInFlight: maxInFlight, PerPartition: perPartition, GrowthRate: rate * growth}
	s.InFlight = ceilInt(rate * s.TurnTimeAt)
	s.InFlightMean = ceilInt(rate * s.TurnTimeMean)
	s.InFlightBurst = occupancy(rate * s.TurnTimeMean)
	s.Slots = max(s.InFlight, s.InFlightBurst)
	s.Members = max(1, ceilInt(float64(s.Slots)/float64(maxInFlight)))
	s.GrowthInFlight = ceilInt(s.GrowthRate * s.TurnTimeAt)
	s.GrowthBurst = occupancy(s.GrowthRate * s.TurnTimeMean)
	s.GrowthSlots = max(s.GrowthInFlight, s.GrowthBurst)
	s.GrowthMembers = max(1, ceilInt(float64(s.GrowthSlots)/float64(maxInFlight)))
	byTurns := ceilInt(float64(s.GrowthSlots) / float64(perPartition))
	s.Partitions = max(s.GrowthMembers, byTurns)
	if byTurns > s.GrowthMembers {
		s.PartitionsPerRule = fmt.Sprintf("%d turns in flight at %d per partition", s.GrowthSlots, perPartition)
	} else {
		s.PartitionsPerRule = fmt.Sprintf("one per member at %gx growth (a member without a partition idles)", growth)
	}
	return s
}

// occupancy is the number of turns in flight that random arrivals with mean turns in flight
// stay within sizeOccupancy of the time: the quantile of the Poisson distribution.
func occupancy(mean float64) int {
	if mean <= 0 {
		return 0
	}
	d := distuv.Poisson{Lambda: mean}
	lo, hi := 0, int(mean+10*math.Sqrt(mean)+10) // CDF(hi) is 1 to float precision
	for lo < hi {
		if mid := (lo + hi) / 2; d.CDF(float64(mid)) >= sizeOccupancy {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// occupancyRate is the highest rate at which the turns in flight, Poisson-distributed with
// mean rate times meanTime (random arrivals, any turn-time distribution), stay within slots
// with probability sizeOccupancy.
func occupancyRate(slots int, meanTime float64) float64 {
	lo, hi := 0.0, float64(slots)/meanTime
	for range 60 {
		mid := (lo + hi) / 2
		if mid > 0 && (distuv.Poisson{Lambda: mid * meanTime}).CDF(float64(slots)) < sizeOccupancy {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo
}

// writeSizePlot writes the plot of s to path, in the format its extension names.
func writeSizePlot(s sizing, path string) error {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg":
	default:
		return usagef("--plot %q: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Throughput against turns in flight (turn time: %s)", s.TurnTimeSource)
	p.X.Label.Text = "turns in flight (L)"
	p.Y.Label.Text = "throughput (turns/s)"
	p.Add(plotter.NewGrid())
	// Every line starts at the origin and the steepest (the mean's) ends at 1/1.4 of the
	// height: the top left is free for the legend.
	xmax := float64(s.GrowthSlots) * 1.25
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, 1.4*xmax/min(s.TurnTimeMean, s.TurnTimeAt)
	p.Legend.Top, p.Legend.Left = true, true

	atP := plotter.NewFunction(func(l float64) float64 { return l / s.TurnTimeAt })
	atP.Color = plotter.DefaultLineStyle.Color
	atP.Width = vg.Points(1.5)
	p.Add(atP)
	p.Legend.Add(fmt.Sprintf("Little's law, W = p%g (%s): λ = L/W", s.Percentile, seconds(s.TurnTimeAt)), atP)

	atMean := plotter.NewFunction(func(l float64) float64 { return l / s.TurnTimeMean })
	atMean.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(atMean)
	p.Legend.Add(fmt.Sprintf("Little's law, W = mean (%s)", seconds(s.TurnTimeMean)), atMean)

	const steps = 200
	curve := make(plotter.XYs, 0, steps+1)
	for i := range steps + 1 {
		l := max(1, int(xmax*float64(i)/steps))
		curve = append(curve, plotter.XY{X: float64(l), Y: occupancyRate(l, s.TurnTimeMean)})
	}
	line, err := plotter.NewLine(curve)
	if err != nil {
		return err
	}
	line.Color = plotutil.Color(1)
	line.Width = vg.Points(1.5)
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("from the distribution: random arrivals within L %g%% of the time", sizeOccupancy*100), line)

	targets, err := plotter.NewScatter(plotter.XYs{{X: float64(s.InFlight), Y: s.Rate}, {X: float64(s.GrowthInFlight), Y: s.GrowthRate}})
	if err != nil {
		return err
	}
	targets.Color = plotutil.Color(2)
	targets.Radius = vg.Points(4)
	p.Add(targets)
	p.Legend.Add(fmt.Sprintf("target %g/s (L = %d) and with growth %g/s (L = %d)", s.Rate, s.InFlight, s.GrowthRate, s.GrowthInFlight), targets)

	if err := p.Save(9*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("write the plot %s: %w", path, err)
	}
	return nil
}

func sizeCmd(_ context.Context, e *env, args []string) error {
	f := newFlags(e, "size", sizeUsage).withJSON()
	rate := f.Float64("rate", 0, "the target rate of turns, per second (required)")
	p50 := f.Duration("turn-p50", 0, "the median turn time (a Go duration: 20s)")
	p99 := f.Duration("turn-p99", 0, "the 99th percentile of the turn time")
	samples := f.String("samples", "", "a file of measured turn times, one a line (\"-\": standard input), instead of --turn-p50 and --turn-p99")
	percentile := f.Float64("percentile", 99, "the percentile of the turn time that sizes the turns in flight (50 to 99.9)")
	growth := f.Float64("growth", 2, "the growth of the rate the partitions are sized for (2: twice the rate)")
	maxInFlight := f.Int("max-in-flight", consumer.DefaultMaxInFlight, "turns one member runs at once (consumer.Config.MaxInFlight)")
	perPartition := f.Int("max-in-flight-per-partition", 0, "turns one partition runs at once (consumer.Config.MaxInFlightPerPartition; 0: --max-in-flight)")
	byPartition := f.Bool("ordering-by-partition", false, "the consumer runs a partition's records one at a time (consumer.OrderByPartition)")
	plotPath := f.String("plot", "", "write the plot to this .png or .svg file (default: no plot)")
	if err := f.parse(args); err != nil {
		return err
	}
	switch {
	case !(*rate > 0) || math.IsInf(*rate, 0):
		return usagef("--rate is required and must be a positive number of turns per second")
	case *samples == "" && *p50 <= 0 && *p99 <= 0:
		return usagef("give the turn time: --turn-p50 (and --turn-p99), or --samples")
	case *samples != "" && (*p50 != 0 || *p99 != 0):
		return usagef("give --samples or --turn-p50 and --turn-p99, not both")
	case *p50 < 0 || *p99 < 0:
		return usagef("--turn-p50 and --turn-p99 must be positive")
	case *p50 > 0 && *p99 > 0 && *p99 < *p50:
		return usagef("--turn-p99 %s is below --turn-p50 %s", *p99, *p50)
	case !(*percentile >= 50 && *percentile <= 99.9):
		return usagef("--percentile must be between 50 and 99.9")
	case !(*growth >= 1) || math.IsInf(*growth, 0):
		return usagef("--growth must be 1 or more (partitions cannot be reduced: size them for the rate to come)")
	case *maxInFlight <= 0:
		return usagef("--max-in-flight must be positive")
	case *perPartition < 0:
		return usagef("--max-in-flight-per-partition must be positive (or 0: --max-in-flight)")
	}
	var times turnTimes
	if *samples != "" {
		in, name := io.Reader(os.Stdin), "standard input"
		if *samples != "-" {
			file, err := os.Open(*samples)
			if err != nil {
				return usagef("--samples: %v", err)
			}
			defer file.Close()
			in, name = file, *samples
		}
		s, err := readSamples(in, name)
		if err != nil {
			return err
		}
		times = sampleTimes(s, name)
	} else {
		lo, hi := p50.Seconds(), p99.Seconds()
		if lo == 0 {
			lo = hi
		}
		if hi == 0 {
			hi = lo
		}
		times = logNormalTimes(lo, hi)
	}
	per := *perPartition
	switch {
	case *byPartition:
		per = 1
	case per == 0:
		per = *maxInFlight
	}
	s := size(times, *rate, *growth, *percentile, *maxInFlight, per)
	if *plotPath != "" && *plotPath != "none" { // "none": what the default was before there was no plot by default
		if err := writeSizePlot(s, *plotPath); err != nil {
			return err
		}
		s.Plot = *plotPath
	}
	if *f.json {
		return printJSON(e.stdout, s)
	}
	return printSizing(e.stdout, s)
}

// printSizing prints s as a table and the rules it rests on.
func printSizing(w io.Writer, s sizing) error {
	fmt.Fprintf(w, "turn time: %s; p50 %s, p%g %s, mean %s\n\n", s.TurnTimeSource, seconds(s.TurnTimeP50), s.Percentile,
		seconds(s.TurnTimeAt), seconds(s.TurnTimeMean))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\tAT %g/s\tWITH GROWTH x%g (%g/s)\n", s.Rate, s.Growth, s.GrowthRate)
	fmt.Fprintf(tw, "turns in flight (λ·W, W = p%g)\t%d\t%d\n", s.Percentile, s.InFlight, s.GrowthInFlight)
	fmt.Fprintf(tw, "turns in flight (λ·mean)\t%d\t%d\n", s.InFlightMean, ceilInt(s.GrowthRate*s.TurnTimeMean))
	fmt.Fprintf(tw, "turns in flight %g%% of the time (random arrivals)\t%d\t%d\n", sizeOccupancy*100, s.InFlightBurst, s.GrowthBurst)
	fmt.Fprintf(tw, "slots (the larger of the first and third)\t%d\t%d\n", s.Slots, s.GrowthSlots)
	fmt.Fprintf(tw, "members (%d turns in flight each)\t%d\t%d\n", s.MaxInFlight, s.Members, s.GrowthMembers)
	fmt.Fprintf(tw, "partitions of the requests topic\t%d\t%d\n", s.Partitions, s.Partitions)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nPartitions: %d, %s.\n"+
		"Create the topic with them now: a topic's partitions cannot be reduced, and adding partitions\n"+
		"later moves keys (conversations) to other partitions, so a conversation's next turn can run on\n"+
		"another member before its previous one finished. Members can be added or removed at any time,\n"+
		"up to the partition count.\n", s.Partitions, s.PartitionsPerRule)
	if s.Plot != "" {
		fmt.Fprintf(w, "Plot: %s\n", s.Plot)
	}
	return nil
}

// seconds formats a number of seconds as a rounded Go duration.
func seconds(v float64) string {
	d := time.Duration(v * float64(time.Second))
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
