// budgetd console
