-- with_field(t, key, value, f): runs f with t[key] = value, then puts the old value back (also
-- when f raises, whose error goes on).
return function(t, key, value, f)
  local was = t[key]
  t[key] = value
  local ok, err = pcall(f)
  t[key] = was
  if not ok then error(err, 0) end
end
