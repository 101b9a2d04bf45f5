package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// pageNames are the templates under templates/, each rendered inside layout.html.
var pageNames = []string{"overview", "conversations", "timeline", "deadletters", "redriven", "outbox", "lag", "held", "released", "error"}

// shell is what layout.html renders around a page.
type shell struct {
	Title   string
	Base    string
	Token   string
	Actions bool
	App     string
	Page    any
}

func (h *Handler) parseTemplates() error {
	funcs := template.FuncMap{
		"time":     fmtTime,
		"ago":      ago,
		"clip":     clip,
		"bytes":    func(b []byte) string { return clip(string(b), 400) },
		"pathpart": pathPart,
	}
	h.pages = make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		h.pages[n] = t
	}
	return nil
}

// render writes p in the layout with status. A template error is a 500 with its text.
func (h *Handler) render(w http.ResponseWriter, status int, p page) {
	var buf bytes.Buffer
	err := h.pages[p.name].Execute(&buf, shell{Title: p.title, Base: h.cfg.BasePath, Token: h.token,
		Actions: h.cfg.Actions, App: h.cfg.App, Page: p.data})
	if err != nil {
		h.cfg.Logger.Error("console: template failed", "page", p.name, "err", err)
		http.Error(w, "console: template "+p.name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fmtTime formats t in UTC to the millisecond; "-" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

// ago says how long before now t was, to the second; "-" for the zero time.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut with its size.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes in all)", len(s))
}

// pathPart escapes s for one segment of a URL path (a conversation id holding "/").
func pathPart(s string) string {
	return strings.ReplaceAll(template.URLQueryEscaper(s), "+", "%20")
}
