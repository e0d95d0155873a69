package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"modelplane/auth"
	"modelplane/field"
	"modelplane/quota"
	"modelplane/web"
)

// portalQuotas lists the team quotas the user may see, with the form for
// platform admins.
func (s *Server) portalQuotas(w http.ResponseWriter, r *http.Request) {
	s.renderQuotas(w, r, http.StatusOK, web.QuotasProps{})
}

func (s *Server) renderQuotas(w http.ResponseWriter, r *http.Request, status int, props web.QuotasProps) {
	ctx := r.Context()
	f := pageFrame(r)
	qs, err := s.Quotas.List(ctx, f.user)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Layout = f.layout(w, "Team quotas", "fleet")
	props.CanEdit = f.user.PlatformAdmin()
	for _, q := range qs {
		unit := quota.Unit(q.Resource)
		props.Quotas = append(props.Quotas, web.QuotaView{Team: q.Team, Resource: q.Resource,
			Amount: strconv.FormatFloat(q.Amount, 'f', -1, 64), Unit: unit, UpdatedBy: q.UpdatedBy, UpdatedAt: q.UpdatedAt.Format(time.RFC3339)})
	}
	s.render(w, r, status, web.QuotasPage(props))
}

// portalQuotaSet sets a quota from the form.
func (s *Server) portalQuotaSet(w http.ResponseWriter, r *http.Request) {
	if !pageFrame(r).user.PlatformAdmin() {
		s.portalError(w, r, auth.ErrForbidden)
		return
	}
	form := web.QuotaForm{Team: r.PostFormValue("team"), Resource: strings.TrimSpace(r.PostFormValue("resource")),
		Amount: strings.TrimSpace(r.PostFormValue("amount"))}
	errs := web.FieldErrors{}
	amount, err := strconv.ParseFloat(form.Amount, 64)
	if err != nil {
		errs["amount"] = "must be a number, e.g. 16 or 2.5"
	}
	if len(errs) == 0 {
		_, err = s.Quotas.Set(r.Context(), pageFrame(r).user, form.Team, form.Resource, amount)
		if err == nil {
			redirectFlash(w, r, "/quotas", fmt.Sprintf("Quota of team %s for %s set to %s.", form.Team, form.Resource, form.Amount))
			return
		}
		var verrs field.Errors
		if !errors.As(err, &verrs) {
			s.portalError(w, r, err)
			return
		}
		for _, f := range verrs {
			errs[f.Field] = f.Message
		}
	}
	s.renderQuotas(w, r, http.StatusUnprocessableEntity, web.QuotasProps{Form: form, Errors: errs})
}
