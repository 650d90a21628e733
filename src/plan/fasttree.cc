// Placeholder for the fasttree planner (issue 3); replaced by the real planner.
#include <stdexcept>

#include "planners.h"

namespace treeattn::planners {

Plan fasttree(const PrefixTree&, const TreeIndex&, const PlanOptions&) {
  throw std::invalid_argument("planner: 'fasttree' is not implemented yet");
}

}  // namespace treeattn::planners
