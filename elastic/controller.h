// The elastic controller: one actor per training job (class "ElasticController", constructed
// with the job id and its spec). It places the ranks with one placement group, forms epoch
// after epoch of their collective group, drives the steps, and reacts to what the GCS reports
// — a rank's death (by policy: restart in place, reschedule, respawn with more memory after
// an OOM, shrink, fail the job), nodes joining or resources freed (grow toward maxReplicas),
// stragglers and hangs, and scale requests — so that the survivors keep training while
// replacements start. Everything it decides goes to the job's record in the GCS (conditions,
// events, the elastic status). See docs/design.md, "Elastic training".
#pragma once

namespace phalanx::elastic {

// Registers the controller's actor class in this program. Registering a trainer does it (a
// job's controller runs in the program that hosts its trainer); Python's module does it too.
void RegisterController();

}  // namespace phalanx::elastic
