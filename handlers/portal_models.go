package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/go-chi/chi/v5"

	"modelplane/artifact"
	"modelplane/errdefs"
	"modelplane/registry"
	"modelplane/serveapi"
	"modelplane/web"
)

func (s *Server) portalModels(w http.ResponseWriter, r *http.Request) {
	pg := Page{Cursor: r.URL.Query().Get("cursor"), Limit: 50}
	after, err := pg.after()
	if err != nil {
		s.renderError(w, r, http.StatusBadRequest, "bad cursor")
		return
	}
	f := pageFrame(r)
	ms, err := s.Registry.Models(r.Context(), f.user, after, pg.Limit+1)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	list := page(ms, pg.Limit, func(m registry.Model) int64 { return m.ID })
	props := web.ModelsProps{Layout: f.layout(w, "Models", "models"), NextCursor: list.Body.NextCursor, CanCreate: canCreate(f.user)}
	for _, m := range list.Body.Items {
		props.Rows = append(props.Rows, web.ModelRow{Name: m.Name, Team: m.Team, Task: m.Task, Description: m.Description, Versions: m.Versions})
	}
	s.render(w, r, http.StatusOK, web.ModelsPage(props))
}

func (s *Server) modelNewProps(w http.ResponseWriter, r *http.Request, f web.ModelForm, errs web.FieldErrors) web.ModelNewProps {
	frame := pageFrame(r)
	p := web.ModelNewProps{Layout: frame.layout(w, "New model", "models"), Form: f, Errors: errs, Teams: []string{}}
	for _, m := range frame.user.Teams {
		p.Teams = append(p.Teams, m.Team)
	}
	if p.Form.Team == "" {
		p.Form.Team = p.ActiveTeam
	}
	return p
}

func (s *Server) portalModelNew(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, web.ModelNewPage(s.modelNewProps(w, r, web.ModelForm{Task: "classification", InputSchema: `{"type": "object"}`}, nil)))
}

func (s *Server) portalModelCreate(w http.ResponseWriter, r *http.Request) {
	f := web.ModelForm{Team: r.PostFormValue("team"), Name: r.PostFormValue("name"), Task: r.PostFormValue("task"),
		Description: r.PostFormValue("description"), InputSchema: r.PostFormValue("input_schema"), FeatureNames: r.PostFormValue("feature_names")}
	var features []string
	for _, n := range strings.Split(f.FeatureNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			features = append(features, n)
		}
	}
	_, err := s.Registry.CreateModel(r.Context(), pageFrame(r).user, registry.ModelSpec{Team: f.Team, Name: f.Name, Task: f.Task,
		Description: f.Description, InputSchema: json.RawMessage(f.InputSchema), FeatureNames: features})
	if err == nil {
		redirectFlash(w, r, "/models/"+f.Name, "Model "+f.Name+" created.")
		return
	}
	errs, ok := fieldErrors(err)
	switch {
	case ok:
	case errors.Is(err, errdefs.ErrConflict):
		errs = web.FieldErrors{"name": "a model with this name already exists"}
	default:
		s.portalError(w, r, err)
		return
	}
	s.render(w, r, http.StatusUnprocessableEntity, web.ModelNewPage(s.modelNewProps(w, r, f, errs)))
}

func versionRow(v registry.Version) web.VersionRow {
	return web.VersionRow{Name: v.Name, Format: v.Format, Runtime: v.Runtime, Parent: v.Lineage.ParentVersion,
		Created: v.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"), Size: humanize.IBytes(uint64(v.SizeBytes)), Status: v.Status}
}

// servingView shows a version's serving metadata and validation.
func servingView(v registry.Version, task string) web.ServingView {
	var out web.ServingView
	for _, f := range v.Serving.Features {
		sf := web.ServingFeature{Name: f.Name, Categories: strings.Join(f.Categories, ", "), Encoding: f.Encoding}
		if len(f.Categories) > 0 && f.Encoding == "" {
			sf.Encoding = "onehot"
		}
		out.Features = append(out.Features, sf)
	}
	o := v.Serving.Output
	switch {
	case task == registry.TaskRegression:
		out.Output = "Output: the model's value, as is."
	case task == registry.TaskLLM:
		out.Output = "Served by its own runtime."
	case len(o.Classes) > 2:
		out.Output = "Output: label by argmax over " + strings.Join(o.Classes, ", ") + "; score is the winning class's probability."
	default:
		classes := o.Classes
		if len(classes) == 0 {
			classes = []string{"negative", "positive"}
		}
		th := o.Threshold
		if th == 0 {
			th = 0.5
		}
		out.Output = fmt.Sprintf("Output: score is the probability of %s; label %s when score ≥ %g, else %s.", classes[1], classes[1], th, classes[0])
	}
	if len(v.Serving.SampleInputs) > 0 {
		b, _ := json.MarshalIndent(v.Serving.SampleInputs, "", "  ")
		out.SampleInputs = string(b)
	}
	if v.MemoryNeedMB > 0 {
		_, placed := v.Resources.CPUNeeding(v.MemoryNeedMB)
		out.Memory = fmt.Sprintf("Memory: the model needs %d MiB (weights as float32 and the K/V cache, computed from the GGUF file); a replica is placed with %d MiB", v.MemoryNeedMB, placed)
		if v.Resources.MemoryMB == 0 {
			out.Memory += " (resources.memory_mb is not set)."
		} else {
			out.Memory += fmt.Sprintf(" (the larger of the need and resources.memory_mb, %d).", v.Resources.MemoryMB)
		}
	}
	if x := v.Validation; x != nil {
		out.Validation, out.Reason = x.State, x.Reason
		if len(x.Outputs) > 0 && string(x.Outputs) != "[]" {
			var pretty bytes.Buffer
			if json.Indent(&pretty, x.Outputs, "", "  ") == nil {
				out.Outputs = pretty.String()
			}
		}
		if x.LatencyMS != nil {
			var inputs []json.RawMessage
			_ = json.Unmarshal(x.Inputs, &inputs)
			out.Latency = fmt.Sprintf("%.1f ms for %d inputs", *x.LatencyMS, len(inputs))
		}
	}
	return out
}

// Lineage graph geometry, in pixels: one row per version, one lane per
// branch, the label beside the row at a readable size (13 px text, about
// 8 px a character), so that a long chain grows down the page rather
// than shrinking to a thumbnail.
const (
	lineageRow  = 32
	lineageLane = 28
	lineageChar = 8
)

// lineageGraph lays versions out one per row, in the order given, each on
// its parent's lane when it is that parent's first child and on a new lane
// otherwise (a branch), with its name beside it; the graph is sized to
// what it holds.
func lineageGraph(vs []registry.Version, edges []registry.LineageEdge) web.Lineage {
	parent := map[string]string{}
	for _, e := range edges {
		parent[e.Child] = e.Parent
	}
	lane := map[string]int{}
	continued := map[string]bool{}
	lanes, longest := 0, 0
	for _, v := range vs {
		if p, ok := lane[parent[v.Name]]; ok && !continued[parent[v.Name]] {
			lane[v.Name] = p
			continued[parent[v.Name]] = true
		} else {
			lane[v.Name] = lanes
			lanes++
		}
		longest = max(longest, len([]rune(v.Name)))
	}
	g := web.Lineage{}
	labelX := 20 + lanes*lineageLane
	pos := map[string][2]int{}
	for i, v := range vs {
		x, y := 20+lane[v.Name]*lineageLane, 20+i*lineageRow
		pos[v.Name] = [2]int{x, y}
		g.Nodes = append(g.Nodes, web.LineageNode{Name: v.Name, X: x, Y: y, LabelX: labelX})
	}
	g.Width = labelX + longest*lineageChar + 20
	g.Height = 20 + len(vs)*lineageRow
	for _, e := range edges {
		a, okA := pos[e.Parent]
		b, okB := pos[e.Child]
		if okA && okB {
			g.Links = append(g.Links, web.LineageLink{X1: a[0], Y1: a[1], X2: b[0], Y2: b[1]})
		}
	}
	return g
}

func (s *Server) portalModel(w http.ResponseWriter, r *http.Request) {
	f := pageFrame(r)
	p := f.user
	m, vs, edges, err := s.Registry.LineageOf(r.Context(), p, modelParam(r).Name)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	schema, _ := json.MarshalIndent(json.RawMessage(m.InputSchema), "", "  ")
	props := web.ModelProps{Layout: f.layout(w, m.Name, "models"), InputSchema: string(schema), FeatureNames: strings.Join(m.FeatureNames, ", "),
		Row:     web.ModelRow{Name: m.Name, Team: m.Team, Task: m.Task, Description: m.Description, Versions: int64(len(vs))},
		Lineage: lineageGraph(vs, edges), CanWrite: p.CanWrite(m.TeamID)}
	for _, v := range vs {
		props.Versions = append(props.Versions, versionRow(v))
	}
	s.render(w, r, http.StatusOK, web.ModelPage(props))
}

const versionMetadataExample = `{
  "name": "v1",
  "runtime": "onnxruntime",
  "resources": {"gpu_count": 1, "gpu_memory_mb": 4096},
  "sla": {"p99_latency_ms": 50},
  "lineage": {"parent_version": "", "training_job": "", "dataset": ""}
}`

func (s *Server) portalVersionNew(w http.ResponseWriter, r *http.Request) {
	m := modelParam(r)
	s.render(w, r, http.StatusOK, web.VersionNewPage(web.VersionNewProps{Layout: pageFrame(r).layout(w, "Register a version", "models"),
		Model: m.Name, Metadata: versionMetadataExample}))
}

// portalVersionCreate registers a version from the browser form: the files
// are spooled to temporary files while their sha256 is computed, which makes
// the manifest, then streamed through the same registration as the API.
func (s *Server) portalVersionCreate(w http.ResponseWriter, r *http.Request) {
	f := pageFrame(r)
	model := modelParam(r).Name
	// csrfCheck has started the reader when the token came as the form's
	// first part; with the token in X-CSRF-Token (htmx) nothing read the body yet.
	mr := multipartOf(r)
	if mr == nil {
		var err error
		if mr, err = r.MultipartReader(); err != nil {
			s.renderError(w, r, http.StatusBadRequest, "send the form as multipart/form-data")
			return
		}
	}
	props := web.VersionNewProps{Model: model}
	// The form comes back only on an error; the frame is filled then, so a
	// successful upload loads no team list.
	renderForm := func(status int) {
		props.Layout = f.layout(w, "Register a version", "models")
		s.render(w, r, status, web.VersionNewPage(props))
	}
	tmp, err := os.MkdirTemp("", "mp-upload-")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer os.RemoveAll(tmp)
	manifest := map[string]string{}
	var order []string
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.portalError(w, r, err)
			return
		}
		if part.FormName() == "metadata" {
			b, _ := io.ReadAll(io.LimitReader(part, 1<<20))
			props.Metadata = string(b)
			continue
		}
		if part.FormName() != "files" || part.FileName() == "" {
			continue
		}
		name := part.FileName()
		if _, dup := manifest[name]; dup {
			props.Error = name + ": uploaded twice"
			renderForm(http.StatusUnprocessableEntity)
			return
		}
		f, err := os.Create(fmt.Sprintf("%s/%d", tmp, len(order)))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h := sha256.New()
		_, err = io.Copy(io.MultiWriter(f, h), part)
		f.Close()
		if err != nil {
			s.portalError(w, r, err)
			return
		}
		manifest[name] = hex.EncodeToString(h.Sum(nil))
		order = append(order, name)
	}
	var spec registry.VersionSpec
	dec := json.NewDecoder(strings.NewReader(props.Metadata))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		props.Errors = web.FieldErrors{"metadata": "is not valid version metadata: " + err.Error()}
		renderForm(http.StatusUnprocessableEntity)
		return
	}
	mj, _ := json.Marshal(manifest)
	files := func(u *artifact.Upload) error {
		for i, name := range order {
			f, err := os.Open(fmt.Sprintf("%s/%d", tmp, i))
			if err != nil {
				return err
			}
			err = u.Add(r.Context(), name, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	v, err := s.Registry.RegisterVersion(r.Context(), f.user, model, spec, mj, files)
	if err != nil {
		status, msg, _ := statusOf(err)
		if fe, ok := fieldErrors(err); ok {
			props.Errors = fe
			parts := []string{}
			for k, m := range fe {
				parts = append(parts, k+": "+m)
			}
			msg = strings.Join(parts, "; ")
		} else if status == http.StatusInternalServerError || status == http.StatusNotFound || status == http.StatusForbidden {
			s.portalError(w, r, err)
			return
		}
		props.Error = msg
		renderForm(status)
		return
	}
	target := "/models/" + model + "/versions/" + v.Name
	if r.Header.Get("HX-Request") == "true" {
		// The form was sent by htmx (to show the upload's progress): the
		// browser goes to the version's page itself.
		setFlash(w, "Version "+v.Name+" registered.")
		w.Header().Set("HX-Redirect", target)
		w.WriteHeader(http.StatusOK)
		return
	}
	redirectFlash(w, r, target, "Version "+v.Name+" registered.")
}

func (s *Server) portalVersion(w http.ResponseWriter, r *http.Request) {
	f, model := pageFrame(r), modelParam(r).Name
	m, vs, edges, err := s.Registry.LineageOf(r.Context(), f.user, model)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	i := slices.IndexFunc(vs, func(v registry.Version) bool { return v.Name == chi.URLParam(r, "version") })
	if i < 0 {
		s.portalError(w, r, errdefs.ErrNotFound)
		return
	}
	v := vs[i]
	cmp := comparedWith(v, vs, s.servingVersions(r, model))
	meta, _ := json.MarshalIndent(v, "", "  ")
	s.render(w, r, http.StatusOK, web.VersionPage(web.VersionProps{Layout: f.layout(w, model+" "+v.Name, "models"), Model: model,
		Row: versionRow(v), Metadata: string(meta), Lineage: lineageGraph(vs, edges), Serving: servingView(v, m.Task),
		Metrics: metricsTable(cmp), Answers: answersTable(cmp)}))
}

// servingVersions are the versions of model taking traffic on the
// endpoints the user sees, each with the endpoints it serves on; a failure
// to read endpoints is logged and compares with the parent alone.
func (s *Server) servingVersions(r *http.Request, model string) map[string][]string {
	out := map[string][]string{}
	const page = 500
	after := int64(0)
	for {
		eps, err := s.Endpoints.List(r.Context(), pageFrame(r).user, after, page)
		if err != nil {
			s.Log.WarnContext(r.Context(), "serving versions", slog.String("error", err.Error()))
			return out
		}
		for _, e := range eps {
			after = e.ID
			if e.Model != model {
				continue
			}
			for _, t := range e.Traffic {
				if t.Weight > 0 {
					out[t.Version] = append(out[t.Version], e.Name)
				}
			}
		}
		if len(eps) < page {
			return out
		}
	}
}

// compared is a version and those its page compares it with: its parent
// and the serving versions, in order (the version first), each with its
// roles joined ("parent; serving on fraud-scoring").
type compared struct {
	versions []registry.Version
	columns  []web.MetricsColumn
}

// comparedWith picks the versions v's page compares it with.
func comparedWith(v registry.Version, all []registry.Version, serving map[string][]string) compared {
	byName := map[string]registry.Version{}
	for _, x := range all {
		byName[x.Name] = x
	}
	roles := map[string][]string{}
	order := []string{v.Name}
	add := func(name, role string) {
		if _, ok := byName[name]; !ok {
			return
		}
		if _, seen := roles[name]; !seen && name != v.Name {
			order = append(order, name)
		}
		roles[name] = append(roles[name], role)
	}
	if v.Lineage.ParentVersion != "" {
		add(v.Lineage.ParentVersion, "parent")
	}
	for _, name := range slices.Sorted(maps.Keys(serving)) {
		add(name, "serving on "+strings.Join(serving[name], ", "))
	}
	var c compared
	for _, n := range order {
		c.versions = append(c.versions, byName[n])
		c.columns = append(c.columns, web.MetricsColumn{Version: n, Role: strings.Join(roles[n], "; ")})
	}
	return c
}

// metricsTable sets the version's offline metrics beside the compared
// versions' (one column per version); nil when none of them has a metric.
func metricsTable(c compared) *web.MetricsTable {
	names := map[string]bool{}
	for _, v := range c.versions {
		for k := range v.OfflineMetrics {
			names[k] = true
		}
	}
	if len(names) == 0 {
		return nil
	}
	t := &web.MetricsTable{Columns: c.columns}
	for _, k := range slices.Sorted(maps.Keys(names)) {
		row := web.MetricsRow{Name: k}
		for _, v := range c.versions {
			val, ok := v.OfflineMetrics[k]
			cell := "–"
			if ok {
				cell = strconv.FormatFloat(val, 'f', -1, 64)
			}
			row.Values = append(row.Values, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// answersTable sets the version's validation inputs beside its answers
// and the compared versions' stored answers to the same inputs, with each
// one's disagreement rate; nil when the version's validation answered
// nothing.
func answersTable(c compared) *web.AnswersTable {
	v := c.versions[0]
	inputs, _ := registry.Answers(v.Validation)
	if len(inputs) == 0 {
		return nil
	}
	t := &web.AnswersTable{Columns: c.columns, Rows: make([]web.AnswersRow, len(inputs))}
	for i, in := range inputs {
		t.Rows[i].Input = inputText(in)
	}
	for j, other := range c.versions {
		cmp := registry.CompareAnswers(v.Validation, other.Validation)
		for i := range inputs {
			t.Rows[i].Cells = append(t.Rows[i].Cells, web.AnswerCell{Text: answerText(cmp.Theirs[i]), Differs: cmp.Differs[i]})
		}
		if j == 0 {
			continue
		}
		switch {
		case cmp.Compared == 0:
			t.Rates = append(t.Rates, "not compared: no labels on these inputs")
		default:
			t.Rates = append(t.Rates, fmt.Sprintf("%d of %d inputs (%.0f%%)", cmp.Disagree, cmp.Compared, 100*float64(cmp.Disagree)/float64(cmp.Compared)))
		}
	}
	return t
}

// inputText writes an instance as "feature=value" pairs in its order, or
// its JSON when it is not an object.
func inputText(in json.RawMessage) string {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return string(in)
	}
	var parts []string
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return string(in)
		}
		var val json.RawMessage
		if d.Decode(&val) != nil {
			return string(in)
		}
		parts = append(parts, fmt.Sprintf("%v=%s", k, strings.Trim(string(val), `"`)))
	}
	return strings.Join(parts, ", ")
}

// answerText is an answer as "fraud 0.97", a regression's value, or "–"
// for none.
func answerText(p *serveapi.Prediction) string {
	switch {
	case p == nil:
		return "–"
	case p.Label != "" && p.Score != nil:
		return fmt.Sprintf("%s %.2f", p.Label, *p.Score)
	case p.Label != "":
		return p.Label
	case p.Value != nil:
		return strconv.FormatFloat(*p.Value, 'g', 6, 64)
	}
	return "–"
}
