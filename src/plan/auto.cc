// Placeholder for the auto planner (issue 3); replaced by the real planner.
#include <stdexcept>

#include "planners.h"

namespace treeattn::planners {

Plan auto_plan(const PrefixTree&, const TreeIndex&, const PlanOptions&) {
  throw std::invalid_argument("planner: 'auto' is not implemented yet");
}

}  // namespace treeattn::planners
