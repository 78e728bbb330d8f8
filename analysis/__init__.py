"""Success statistics, failure attribution, component trigger rates, reports and plots."""
