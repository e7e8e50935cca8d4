// octet: the umbrella header. Include this to get the whole public API.
#pragma once

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/random.h"
#include "core/scaling.h"
#include "core/tensor.h"
#include "ops/op_checks.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"
#include "ops/random.h"
#include "ops/shape.h"
