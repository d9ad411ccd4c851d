// T.set_flush_denormal (PyTorch's torch.set_flush_denormal): while on, the CPU kernels read
// subnormal floats as zero and write zero for subnormal results (x86's DAZ and FTZ), which spares
// the microcode assist each product with a subnormal operand or result takes (some 100 cycles).
// The setting is the process's; a thread takes it into its own floating-point state when it calls
// set_flush_denormal or enters parallel_for, and the pool's workers before each job.
#pragma once

namespace cr {

// Sets the mode; false (and nothing set) where the CPU has no such mode (not x86-64).
bool set_flush_denormal(bool on);
// This thread's floating-point state to the setting, if it changed since this thread last looked.
void apply_flush_denormal();

}  // namespace cr
