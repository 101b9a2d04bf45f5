package main

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// inputSeries is what measureInput found for one strategy: each turn's input stats, by turn
// number (index 0 is turn 1), and the summarizer's calls.
type inputSeries struct {
	Strategy           strategy     `json:"strategy"`
	Turns              []inputStats `json:"turns"`
	Summaries          int          `json:"summaries"`
	SummaryInputTokens int64        `json:"summary_input_tokens"`
	ModelCalls         int          `json:"model_calls"`
}

// measureInput runs a conversation of turns turns for each strategy, the model called over
// HTTP through turn/chatcompletion, and returns each strategy's series. budget is the
// compaction strategy's ContextBudget (0: the default).
func measureInput(ctx context.Context, turns, budget int, progress func(string)) ([]inputSeries, error) {
	var out []inputSeries
	for _, s := range strategies {
		c, err := newConversation(s, conversationOptions{Budget: budget, OverHTTP: true, CacheTokens: true})
		if err != nil {
			return nil, err
		}
		series := inputSeries{Strategy: s}
		for i := 1; i <= turns; i++ {
			if err := c.run(ctx, i); err != nil {
				c.Close()
				return nil, err
			}
			st, err := c.stats(i)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: turn %d: %w", s, i, err)
			}
			series.Turns = append(series.Turns, st)
			if progress != nil && i%100 == 0 {
				progress(fmt.Sprintf("%s: turn %d: %d tokens", s, i, st.Tokens))
			}
		}
		c.provider.mu.Lock()
		series.Summaries, series.SummaryInputTokens, series.ModelCalls = c.provider.summaries, c.provider.summaryInputTokens, c.provider.modelCalls
		c.provider.mu.Unlock()
		c.Close()
		out = append(out, series)
	}
	return out, nil
}

// tableTurns are the turns the table shows (those past the conversation's end are left out).
var tableTurns = []int{1, 5, 10, 25, 50, 100, 250, 500, 750, 1000}

// writeInputTable writes the series as a Markdown table: tokens and bytes of each turn's
// largest model request by strategy at tableTurns (and the last turn), then the largest and
// the mean over all turns, the turns whose first request held every fact of turns 1 to 5,
// and the summarizer's work.
func writeInputTable(w io.Writer, series []inputSeries) {
	turns := len(series[0].Turns)
	fmt.Fprint(w, "| turn |")
	for _, s := range series {
		fmt.Fprintf(w, " %s: tokens | bytes |", s.Strategy)
	}
	fmt.Fprint(w, "\n|---|")
	for range series {
		fmt.Fprint(w, "---|---|")
	}
	fmt.Fprintln(w)
	shown := map[int]bool{}
	for _, t := range append(tableTurns, turns) {
		if t > turns || shown[t] {
			continue
		}
		shown[t] = true
		fmt.Fprintf(w, "| %s |", group(t))
		for _, s := range series {
			st := s.Turns[t-1]
			fmt.Fprintf(w, " %s | %s |", group(st.Tokens), group(st.Bytes))
		}
		fmt.Fprintln(w)
	}
	row := func(name string, f func(s inputSeries) string) {
		fmt.Fprintf(w, "| %s |", name)
		for _, s := range series {
			fmt.Fprintf(w, " %s |", f(s))
		}
		fmt.Fprintln(w)
	}
	row("largest", func(s inputSeries) string {
		var t, b int
		for _, st := range s.Turns {
			t, b = max(t, st.Tokens), max(b, st.Bytes)
		}
		return group(t) + " | " + group(b)
	})
	row("mean", func(s inputSeries) string {
		var t, b int
		for _, st := range s.Turns {
			t, b = t+st.Tokens, b+st.Bytes
		}
		return group(t/len(s.Turns)) + " | " + group(b/len(s.Turns))
	})
	row(fmt.Sprintf("turns 6 to %s whose input holds the 5 facts", group(turns)), func(s inputSeries) string {
		n := 0
		for _, st := range s.Turns[min(len(facts), len(s.Turns)):] {
			if st.AllFacts {
				n++
			}
		}
		return group(n) + " |"
	})
	row("summarizer calls (input tokens)", func(s inputSeries) string {
		return fmt.Sprintf("%s (%s) |", group(s.Summaries), group(int(s.SummaryInputTokens)))
	})
}

// group formats n with commas between thousands.
func group(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + group(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// writeInputPlot writes the plot of the series to path (a .png or .svg): each turn's largest
// model request in tokens, one line per strategy; above at full scale, below zoomed on the
// bounded strategies.
func writeInputPlot(series []inputSeries, path string) error {
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	if format != "png" && format != "svg" {
		return fmt.Errorf("plot %q: want a .png or .svg file", path)
	}
	full, err := inputPlot(series, fmt.Sprintf("Model input per turn, a %s-turn conversation with tool calls", group(len(series[0].Turns))))
	if err != nil {
		return err
	}
	zoomed, err := inputPlot(series, "The same, zoomed on the bounded strategies")
	if err != nil {
		return err
	}
	bounded := 0
	for _, s := range series {
		if s.Strategy != whole {
			for _, st := range s.Turns {
				bounded = max(bounded, st.Tokens)
			}
		}
	}
	zoomed.Y.Max = float64(bounded) * 1.6
	zoomed.Legend.Left = false
	c, err := draw.NewFormattedCanvas(9*vg.Inch, 9*vg.Inch, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	canvases := plot.Align([][]*plot.Plot{{full}, {zoomed}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(12)}, dc)
	full.Draw(canvases[0][0])
	zoomed.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write the plot %s: %w", path, err)
	}
	return f.Close()
}

// inputPlot returns a plot of the series with its title.
func inputPlot(series []inputSeries, title string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "turn"
	p.Y.Label.Text = "tokens of the turn's largest model request (o200k)"
	p.Y.Min = 0
	p.Y.Tick.Marker = groupedTicks{}
	p.X.Tick.Marker = groupedTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.BackgroundColor = color.White
	for k, s := range series {
		xys := make(plotter.XYs, len(s.Turns))
		for i, st := range s.Turns {
			xys[i] = plotter.XY{X: float64(i + 1), Y: float64(st.Tokens)}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(k)
		line.Width = vg.Points(1.5)
		if s.Strategy == window {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(legend(s), line)
	}
	return p, nil
}

// groupedTicks are plot.DefaultTicks labelled as whole numbers with commas.
type groupedTicks struct{}

// Ticks implements plot.Ticker.
func (groupedTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = group(int(ticks[i].Value))
		}
	}
	return ticks
}

// legend names a strategy's line.
func legend(s inputSeries) string {
	switch s.Strategy {
	case whole:
		return "whole history (grows without bound)"
	case window:
		return "last 50 events (loses the beginning)"
	}
	return fmt.Sprintf("compaction (%s summaries)", group(s.Summaries))
}
