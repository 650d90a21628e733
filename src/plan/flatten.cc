// Placeholder for the flatten planner (issue 3); replaced by the real planner.
#include <stdexcept>

#include "planners.h"

namespace treeattn::planners {

Plan flatten(const PrefixTree&, const TreeIndex&, const PlanOptions&) {
  throw std::invalid_argument("planner: 'flatten' is not implemented yet");
}

}  // namespace treeattn::planners
