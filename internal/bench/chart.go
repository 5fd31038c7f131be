package bench

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Series is one line of a chart.
type Series struct {
	Name string    `json:"name"`
	X    []float64 `json:"x"`
	Y    []float64 `json:"y"`
	// Dashed draws the line dashed (published or reference numbers).
	Dashed bool `json:"dashed,omitempty"`
}

// Chart is a line chart with numeric axes, drawn with the standard
// library alone so that generating the benchmark page needs no plotting
// stack.
type Chart struct {
	Title  string   `json:"title"`
	XLabel string   `json:"x_label"`
	YLabel string   `json:"y_label"`
	Series []Series `json:"series"`
	Width  int      `json:"width,omitempty"`
	Height int      `json:"height,omitempty"`
}

var palette = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255},
	{255, 127, 14, 255}, {148, 103, 189, 255}, {140, 86, 75, 255},
}

const textScale = 2 // each font pixel is 2×2 image pixels

type canvas struct{ img *image.RGBA }

func (c canvas) set(x, y int, col color.RGBA) {
	if image.Pt(x, y).In(c.img.Rect) {
		c.img.SetRGBA(x, y, col)
	}
}

func (c canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			c.set(x, y, col)
		}
	}
}

// line draws a 2-pixel line; dash > 0 leaves gaps of that length.
func (c canvas) line(x0, y0, x1, y1 int, col color.RGBA, dash int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	step := 0
	for {
		if dash == 0 || (step/dash)%2 == 0 {
			c.rect(x0, y0, x0+1, y0+1, col)
		}
		step++
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// textWidth is the width in pixels of s drawn by text.
func textWidth(s string) int { return len([]rune(s)) * 6 * textScale }

func (c canvas) text(x, y int, s string, col color.RGBA) {
	for _, r := range s {
		g, ok := glyphs[unicode.ToUpper(r)]
		if !ok {
			g = glyphs['-']
		}
		for row, line := range g {
			for colI, ch := range line {
				if ch == '#' {
					c.rect(x+colI*textScale, y+row*textScale, x+colI*textScale+textScale-1, y+row*textScale+textScale-1, col)
				}
			}
		}
		x += 6 * textScale
	}
}

// textUp draws s rotated a quarter turn anticlockwise, reading upwards.
func (c canvas) textUp(x, y int, s string, col color.RGBA) {
	for _, r := range s {
		g, ok := glyphs[unicode.ToUpper(r)]
		if !ok {
			g = glyphs['-']
		}
		for row, line := range g {
			for colI, ch := range line {
				if ch == '#' {
					px := x + row*textScale
					py := y - colI*textScale
					c.rect(px, py-textScale+1, px+textScale-1, py, col)
				}
			}
		}
		y -= 6 * textScale
	}
}

// niceStep picks a tick step of 1, 2 or 5 × 10^k giving about n ticks.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// Validate reports a chart that cannot be drawn.
func (ch Chart) Validate() error {
	if len(ch.Series) == 0 {
		return errors.New("chart has no series")
	}
	points := 0
	for _, s := range ch.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("series %q has %d x values but %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			if math.IsNaN(s.X[i]) || math.IsInf(s.X[i], 0) || math.IsNaN(s.Y[i]) || math.IsInf(s.Y[i], 0) {
				return fmt.Errorf("series %q has a non-finite point", s.Name)
			}
		}
		points += len(s.X)
	}
	if points == 0 {
		return errors.New("chart has no points")
	}
	return nil
}

// WritePNG draws the chart as a PNG.
func (ch Chart) WritePNG(w io.Writer) error {
	if err := ch.Validate(); err != nil {
		return err
	}
	W, H := ch.Width, ch.Height
	if W <= 0 {
		W = 900
	}
	if H <= 0 {
		H = 520
	}
	if W < 300 || H < 200 || W > 8000 || H > 8000 {
		return fmt.Errorf("chart size %d×%d is outside 300×200 … 8000×8000", W, H)
	}
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	c := canvas{img}
	white := color.RGBA{255, 255, 255, 255}
	ink := color.RGBA{40, 40, 40, 255}
	grid := color.RGBA{225, 225, 225, 255}
	c.rect(0, 0, W-1, H-1, white)

	// Data range; y starts at zero so bars of latency compare honestly.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	for _, s := range ch.Series {
		for i := range s.X {
			xmin = math.Min(xmin, s.X[i])
			xmax = math.Max(xmax, s.X[i])
			ymax = math.Max(ymax, s.Y[i])
		}
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if ymax == 0 {
		ymax = 1
	}
	ystep := niceStep(ymax, 6)
	ymax = math.Ceil(ymax*1.05/ystep) * ystep
	xstep := niceStep(xmax-xmin, 8)

	left, right, top, bottom := 110, W-30, 60, H-70
	px := func(x float64) int { return left + int(math.Round((x-xmin)/(xmax-xmin)*float64(right-left))) }
	py := func(y float64) int { return bottom - int(math.Round(y/ymax*float64(bottom-top))) }

	for y := 0.0; y <= ymax+ystep/2; y += ystep {
		yy := py(y)
		c.rect(left, yy, right, yy, grid)
		lbl := fmtTick(y)
		c.text(left-10-textWidth(lbl), yy-7, lbl, ink)
	}
	for x := math.Ceil(xmin/xstep) * xstep; x <= xmax+xstep/2; x += xstep {
		xx := px(x)
		if xx > right+1 {
			break
		}
		c.rect(xx, top, xx, bottom, grid)
		lbl := fmtTick(x)
		c.text(xx-textWidth(lbl)/2, bottom+10, lbl, ink)
	}
	c.rect(left, top, left+1, bottom, ink)
	c.rect(left, bottom, right, bottom+1, ink)

	c.text((W-textWidth(ch.Title))/2, 18, ch.Title, ink)
	c.text((left+right-textWidth(ch.XLabel))/2, H-30, ch.XLabel, ink)
	c.textUp(18, (top+bottom+textWidth(ch.YLabel))/2, ch.YLabel, ink)

	for si, s := range ch.Series {
		col := palette[si%len(palette)]
		dash := 0
		if s.Dashed {
			dash = 6
		}
		for i := 1; i < len(s.X); i++ {
			c.line(px(s.X[i-1]), py(s.Y[i-1]), px(s.X[i]), py(s.Y[i]), col, dash)
		}
		for i := range s.X {
			x, y := px(s.X[i]), py(s.Y[i])
			c.rect(x-3, y-3, x+3, y+3, col)
		}
		// Legend, top left inside the plot.
		ly := top + 10 + si*22
		c.rect(left+14, ly+4, left+40, ly+8, col)
		c.text(left+48, ly, s.Name, ink)
	}
	return png.Encode(w, img)
}

// ParseSeries reads "name:x=y,x=y,..." as given to the chart command.
func ParseSeries(spec string) (Series, error) {
	name, pts, ok := strings.Cut(spec, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return Series{}, fmt.Errorf("series %q: want NAME:X=Y,X=Y,…", spec)
	}
	s := Series{Name: strings.TrimSpace(name)}
	for _, p := range strings.Split(pts, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		xs, ys, ok := strings.Cut(p, "=")
		if !ok {
			return Series{}, fmt.Errorf("series %q: point %q is not X=Y", s.Name, p)
		}
		x, err1 := strconv.ParseFloat(strings.TrimSpace(xs), 64)
		y, err2 := strconv.ParseFloat(strings.TrimSpace(ys), 64)
		if err1 != nil || err2 != nil {
			return Series{}, fmt.Errorf("series %q: point %q is not numeric", s.Name, p)
		}
		s.X = append(s.X, x)
		s.Y = append(s.Y, y)
	}
	if len(s.X) == 0 {
		return Series{}, fmt.Errorf("series %q has no points", s.Name)
	}
	return s, nil
}
