package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"modelplane/notify"
	"modelplane/web"
)

// webhooksProps fills the webhooks page of team, or of the active team
// when team is "" (a form re-rendered after it failed shows its team).
func (s *Server) webhooksProps(w http.ResponseWriter, r *http.Request, team string) (web.WebhooksProps, error) {
	f := pageFrame(r)
	props := web.WebhooksProps{Layout: f.layout(w, "Webhooks", "team"), EventTypes: notify.Types}
	props.Team = props.ActiveTeam
	if team != "" {
		props.Team = team
	}
	if props.Team == "" {
		return props, nil
	}
	t, err := s.Tenant.Team(r.Context(), f.user, props.Team)
	if err != nil {
		return props, err
	}
	props.IsAdmin = f.user.CanAdmin(t.ID)
	hooks, err := s.Webhooks.List(r.Context(), f.user)
	if err != nil {
		return props, err
	}
	for _, h := range hooks {
		if h.Team == props.Team {
			props.Webhooks = append(props.Webhooks, webhookRow(h))
		}
	}
	return props, nil
}

func webhookRow(h notify.Webhook) web.WebhookRow {
	return web.WebhookRow{ID: h.ID, URL: h.URL, EventTypes: strings.Join(h.EventTypes, ", "), CreatedBy: h.CreatedBy, Created: when(&h.CreatedAt)}
}

func (s *Server) portalWebhooks(w http.ResponseWriter, r *http.Request) {
	props, err := s.webhooksProps(w, r, "")
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, web.WebhooksPage(props))
}

// portalWebhookCreate adds a webhook and shows its secret, once, on a
// page that is never cached.
func (s *Server) portalWebhookCreate(w http.ResponseWriter, r *http.Request) {
	team, ok := s.formTeam(w, r)
	if !ok {
		return
	}
	spec := notify.WebhookSpec{Team: team, URL: strings.TrimSpace(r.PostFormValue("url")), EventTypes: r.PostForm["event_types"]}
	_, secret, err := s.Webhooks.Create(r.Context(), pageFrame(r).user, spec)
	errs, invalid := fieldErrors(err)
	if err != nil && !invalid {
		s.portalError(w, r, err)
		return
	}
	props, perr := s.webhooksProps(w, r, team)
	if perr != nil {
		s.portalError(w, r, perr)
		return
	}
	if invalid {
		props.Errors, props.Form = errs, web.WebhookForm{URL: spec.URL, EventTypes: spec.EventTypes}
		s.render(w, r, http.StatusUnprocessableEntity, web.WebhooksPage(props))
		return
	}
	props.NewSecret, props.NewURL = secret, spec.URL
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, http.StatusOK, web.WebhooksPage(props))
}

// webhookParam is the {webhook} of the path; ok is false (and the page a
// 404) when it is no id.
func (s *Server) webhookParam(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	id, err := strconv.ParseInt(chi.URLParam(r, name), 10, 64)
	if err != nil {
		s.renderError(w, r, http.StatusNotFound, "not found")
		return 0, false
	}
	return id, true
}

func (s *Server) portalWebhookDelete(w http.ResponseWriter, r *http.Request) {
	id, ok := s.webhookParam(w, r, "webhook")
	if !ok {
		return
	}
	if err := s.Webhooks.Delete(r.Context(), pageFrame(r).user, id); err != nil {
		s.portalError(w, r, err)
		return
	}
	redirectFlash(w, r, "/team/webhooks", "Webhook deleted with its delivery log.")
}

// portalWebhookDeliveries is a webhook's delivery log, newest first.
func (s *Server) portalWebhookDeliveries(w http.ResponseWriter, r *http.Request) {
	id, ok := s.webhookParam(w, r, "webhook")
	if !ok {
		return
	}
	f := pageFrame(r)
	h, err := s.Webhooks.Get(r.Context(), f.user, id)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	ds, err := s.Webhooks.Deliveries(r.Context(), f.user, id, 100)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	t, err := s.Tenant.Team(r.Context(), f.user, h.Team)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props := web.WebhookDeliveriesProps{Layout: f.layout(w, "Webhook deliveries", "team"), Webhook: webhookRow(h), Team: h.Team,
		IsAdmin: f.user.CanAdmin(t.ID)}
	for _, d := range ds {
		row := web.DeliveryRow{ID: d.ID, EventType: d.EventType, State: d.State, Attempts: d.Attempts, LastError: d.LastError,
			Created: when(&d.CreatedAt), Updated: when(&d.UpdatedAt), Redeliverable: d.State == "dead" || d.State == "delivered",
			Event: strings.TrimSpace(d.Event.Name + " " + d.Event.State)}
		if d.LastStatus != 0 {
			row.LastStatus = strconv.Itoa(d.LastStatus)
		}
		props.Deliveries = append(props.Deliveries, row)
	}
	s.render(w, r, http.StatusOK, web.WebhookDeliveriesPage(props))
}

func (s *Server) portalWebhookRedeliver(w http.ResponseWriter, r *http.Request) {
	id, ok := s.webhookParam(w, r, "webhook")
	if !ok {
		return
	}
	delivery, ok := s.webhookParam(w, r, "delivery")
	if !ok {
		return
	}
	if err := s.Webhooks.Redeliver(r.Context(), pageFrame(r).user, id, delivery); err != nil {
		s.portalError(w, r, err)
		return
	}
	redirectFlash(w, r, "/team/webhooks/"+strconv.FormatInt(id, 10), "Delivery "+strconv.FormatInt(delivery, 10)+" queued again from its first try.")
}
