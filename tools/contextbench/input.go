package main

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
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
// model request in tokens, one line per strategy.
func writeInputPlot(series []inputSeries, path string) error {
	if !strings.HasSuffix(path, ".png") && !strings.HasSuffix(path, ".svg") {
		return fmt.Errorf("plot %q: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Model input per turn, a %s-turn conversation with tool calls", group(len(series[0].Turns)))
	p.X.Label.Text = "turn"
	p.Y.Label.Text = "tokens of the turn's largest model request (o200k)"
	p.Y.Min = 0
	p.Y.Tick.Marker = groupedTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	for k, s := range series {
		xys := make(plotter.XYs, len(s.Turns))
		for i, st := range s.Turns {
			xys[i] = plotter.XY{X: float64(i + 1), Y: float64(st.Tokens)}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(k)
		line.Width = vg.Points(1.5)
		if s.Strategy == window {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(legend(s), line)
	}
	p.BackgroundColor = color.White
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("write the plot %s: %w", path, err)
	}
	return nil
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
