package handlers

import "github.com/danielgtaylor/huma/v2"

// registerAPI registers every /api/v1 operation; the OpenAPI document and the
// cross-team test matrix are both derived from these registrations.
func (s *Server) registerAPI(api huma.API) {
	s.registerMe(api)
	s.registerCLILogin(api)
	s.registerTeams(api)
	s.registerKeys(api)
	s.registerModels(api)
	s.registerVersions(api)
	s.registerUploads(api)
	s.registerEndpoints(api)
	s.registerGraphs(api)
	s.registerAutoscaling(api)
	s.registerRollouts(api)
	s.registerStats(api)
	s.registerExplorer(api)
	s.registerDrift(api)
	s.registerAudit(api)
	s.registerNodes(api)
	s.registerEnrollment(api)
	s.registerCostRates(api)
	s.registerChargeback(api)
	s.registerBudgets(api)
	s.registerQuotas(api)
	s.registerWebhooks(api)
	s.registerGrants(api)
}
