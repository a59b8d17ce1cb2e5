#ifndef MAILSLOT_CSODIUM_SHIM_H
#define MAILSLOT_CSODIUM_SHIM_H
#include <sodium.h>
#endif
