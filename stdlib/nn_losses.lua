-- crescent.nn_losses: torch.nn's loss modules over T.F's losses (crescent.losses), keeping their
-- options (a trailing table, as the functions take them); weight and pos_weight are buffers, as
-- torch registers them (in state_dict, moved by :to()); they print as torch's, options unshown.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local M = {}

-- name -> the function and its options (those holding tensors become buffers)
local LOSSES = {
  CrossEntropyLoss = { "cross_entropy", { "weight", "ignore_index", "reduction", "label_smoothing" } },
  NLLLoss = { "nll_loss", { "weight", "ignore_index", "reduction" } },
  MSELoss = { "mse_loss", { "reduction" } },
  L1Loss = { "l1_loss", { "reduction" } },
  SmoothL1Loss = { "smooth_l1_loss", { "reduction", "beta" } },
  HuberLoss = { "huber_loss", { "reduction", "delta" } },
  BCELoss = { "binary_cross_entropy", { "weight", "reduction" } },
  BCEWithLogitsLoss = { "binary_cross_entropy_with_logits", { "weight", "reduction", "pos_weight" } },
  KLDivLoss = { "kl_div", { "reduction", "log_target" } },
}
local TENSORS = { weight = true, pos_weight = true }

function M.install(nn, F)
  for name, spec in pairs(LOSSES) do
    local fn, keys = F[spec[1]], spec[2]
    local allowed = {}
    for _, k in ipairs(keys) do allowed[k] = true end
    local cls = nn.Module:extend(name)
    function cls:init(opts)
      opts = F._check_opts(name, 1, opts, allowed)
      self._keys = {}
      for _, k in ipairs(keys) do
        local v = opts[k]
        if TENSORS[k] then
          if v ~= nil and not is_tensor(v) then fail(string.format("%s: option %s expected a tensor, got %s", name, k, type(v))) end
          self:register_buffer(k, v)
        else
          self[k] = v
        end
        self._keys[#self._keys + 1] = k
      end
      -- (a bad value raises here, as torch's constructors check theirs)
      if opts.reduction ~= nil and opts.reduction ~= "mean" and opts.reduction ~= "sum" and opts.reduction ~= "none"
        and not (name == "KLDivLoss" and opts.reduction == "batchmean") then
        fail(string.format("%s: %s is not a valid value for reduction", name, tostring(opts.reduction)))
      end
    end
    function cls:forward(input, target)
      local o = {}
      for _, k in ipairs(self._keys) do o[k] = self[k] end
      return fn(input, target, o)
    end
    nn[name] = cls
  end
end

return M
