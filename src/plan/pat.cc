// Placeholder for the pat planner (issue 3); replaced by the real planner.
#include <stdexcept>

#include "planners.h"

namespace treeattn::planners {

Plan pat(const PrefixTree&, const TreeIndex&, const PlanOptions&) {
  throw std::invalid_argument("planner: 'pat' is not implemented yet");
}

}  // namespace treeattn::planners
